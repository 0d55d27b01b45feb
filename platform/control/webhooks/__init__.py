"""Webhooks: where alerts are delivered, for which events, signed with which secret.

The secret signs each delivery, so it is stored as given (not hashed) and leaves the
service in full only twice: from `create` (to show the operator once) and from
`targets` (to the deliverer). Listings and the audit log carry a hint of it.
"""
