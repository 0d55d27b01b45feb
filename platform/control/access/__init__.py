"""Who may do what: users of the console and the admin API (argon2id password hashes,
three roles), and the API keys of the OpenAI-compatible API (stored as hashes, each with
a priority class, the deployments it may use and a rate limit)."""
