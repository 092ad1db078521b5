"""What a credential is, below both the settings reader and the auth layer: the secret type (secret.py),
the kb:* scope names (scopes.py) and the named-token file format (named_tokens.py). Nothing here imports
`settings` or `auth`: settings reads credentials through it, auth checks them with it."""
