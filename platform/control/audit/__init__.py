"""The audit log: every write to the control plane leaves a row, in the same transaction,
saying who did what to which entity, with JSON snapshots of it before and after.

Snapshots are plain JSON objects of the entity's settings (never a secret or a password
hash); `before` is absent for a creation and `after` for a deletion. Other domains write
entries through `AuditRepository` inside their own transactions; `AuditService` reads.
"""
