"""The runbooks (*.md beside this file) as package data: the gateway serves them at
/runbooks/<name> (vigil.platform.api.runbooks), so an installed Vigil carries them."""
