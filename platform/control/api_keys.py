"""The API key lookup at the path `gateway/auth.py` imports it from. The access domain
defines these names (`access/keys.py`, `access/records.py`); once the gateway imports
them from there, this module goes."""

from vigil.platform.control.access.keys import KEY_PREFIX, ApiKeyService, hash_key
from vigil.platform.control.access.records import ApiKeyRecord

__all__ = ["KEY_PREFIX", "ApiKeyRecord", "ApiKeyService", "hash_key"]
