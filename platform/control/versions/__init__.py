"""Models and their versions: registering, listing, retiring, and what workers report
about loading them.

A version is registered with its artifact and a SHA-256 checksum of it: computed at
registration when not given, and verified when given, so that a typo'd path or a file
that changed since someone measured it is refused here rather than at load time.
Versions never change once registered; a new artifact is a new version.
"""
