"""tender_pool.web — the admin web: a live view of the slots and queue, runs with live progress,
the history of parses with every filter, one job's detail, and the operator's actions (cancel a job,
cancel or retry a run, drain and scale), as an ASGI app to mount in the platform's web API or to run
on its own (``tender-pool web``). Needs the ``web`` extra: ``pip install 'tender-pool[web]'``.

    from tender_pool.client import Client
    from tender_pool.web import Principal, create_app

    async def admins(request) -> Principal | None:        # the platform's own session check
        user = await platform.current_user(request)
        if user is None or not user.is_admin:
            return None                                    # 401 on every route
        return Principal(user.email, can=frozenset({"view", "act"}) if user.is_ops else frozenset({"view"}))

    platform_api.mount("/admin/workers/tender-parse", create_app(Client.from_config(), auth=admins))

It imports nothing of the daemon: every read and action goes through ``tender_pool.client``.
"""

from tender_pool.web.app import create_app
from tender_pool.web.auth import Principal, allow_all_insecure, local_only, token_auth
from tender_pool.web.redact import mask_secrets

__all__ = ["Principal", "allow_all_insecure", "create_app", "local_only", "mask_secrets", "token_auth"]
