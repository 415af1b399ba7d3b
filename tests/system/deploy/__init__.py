"""Deployment: the systemd unit and notify protocol, the control socket's access, embedded Redis, live changes."""
