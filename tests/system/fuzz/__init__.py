"""Generated input against the config loader, the submit rules, the status socket, documents and a daemon."""
