"""``create_app``: the admin web as a Starlette app, for ``platform_api.mount(...)`` or ``tender-pool web``.

Everything the app knows lives on its ``Dashboard`` (client, auth, CSRF secret, templates, status
hub): no module globals, so two mounts with two clients never see each other. Every URL it writes
starts with the request's ``root_path`` (the mount's prefix, or a proxy's), never a configured
prefix, so the same app works under ``/`` and under ``/admin/workers/tender-parse``.

Routes (``view`` unless marked; every one answers 401 without a principal, 403 without the permission):

    GET  /                     overview (JSON with ``Accept: application/json``)
    GET  /api/status           ``status --json``            GET /api/history   ``history --json``
    GET  /live/status          SSE: the status, one reader for every viewer
    GET  /runs, /runs/{id}     the runs; a run with live progress
    GET  /runs/{id}/events     SSE: the run's events, ``id`` = stream id (Last-Event-ID / ?since= resume)
    GET  /history, /jobs/{id}  finished jobs (every filter, GET URLs); one job
    POST /jobs/{id}/cancel, /runs/{id}/cancel, /runs/{id}/retry, /pool/drain, /pool/scale   (act)
    POST /login                the standalone server's token form (sets the session cookie)
    GET  /metrics              Prometheus text of this process's registry, when prometheus-client is installed

Actions need ``act``, are absent (403, no buttons) in a read-only app, pass the CSRF check
(``csrf``), are logged with the principal (logger ``tender_pool.web``) and counted in
``tender_pool_web_actions_total{action, outcome}``. A GET on an action URL is 405 (the route
accepts POST only). Blocking client calls run in worker threads; the event loop only serves.
"""

from __future__ import annotations

import logging
import re
import hmac
import secrets
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Callable

import anyio
import jinja2
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tender_pool.client import BadInput, NotFound, Unavailable

from tender_pool.web import csrf, formats, live, params
from tender_pool.web.auth import ACT, SESSION_COOKIE, VIEW, Auth, Principal, resolve, session_value
from tender_pool.web.headers import SecurityHeaders
from tender_pool.web.metrics import action_counter
from tender_pool.web.redact import Redact, mask_secrets

log = logging.getLogger("tender_pool.web")
HERE = Path(__file__).resolve().parent
MAX_FORM = 16 * 1024
MARKDOWN_PREVIEW = 64 * 1024
FAILURES_SHOWN = 5
WALKS = 2  # history searches at once, per app, that walk job hashes (file, started_*): seconds each at 10⁵
_json = msgspec.json.Encoder()
DONE = re.compile(r"[a-z_]{1,20}:[a-z_0-9 ]{0,40}")


class Refused(Exception):
    """An HTTP error page: ``status`` and a one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Dashboard:
    """One mounted admin web: its client, who may use it, and its live status hub."""

    def __init__(self, client: Any, *, auth: Auth, read_only: bool, redact: Redact | None, interval: float,
                 registry: Any, title: str):
        self.client = client
        self.auth = auth
        self.read_only = read_only
        self.redact = redact or mask_secrets
        self.title = title
        self.secret = secrets.token_bytes(32)
        self.login_token: str | None = getattr(auth, "token", None)
        self.hub = live.StatusHub(self._read_status, interval)
        self.actions = action_counter(registry)
        self.registry = registry
        self.walks = threading.BoundedSemaphore(WALKS)
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                                      undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(q=lambda s: urllib.parse.quote(str(s), safe=""), bytes=formats.size,
                                secs=formats.seconds, pct=formats.percent, pretty=formats.pretty_json)

    # --- plumbing ------------------------------------------------------------------------------------

    def _read_status(self) -> bytes:
        return _json.encode(self.client.status())

    async def principal(self, request: Request, need: str) -> Principal:
        p = await resolve(self.auth, request)
        if p is None:
            raise Refused(401, "not signed in")
        if need not in p.can:
            raise Refused(403, f"{p.name} may not {need}")
        request.state.principal = p
        return p

    def page(self, request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        p: Principal | None = getattr(request.state, "principal", None)
        can_act = p is not None and ACT in p.can and not self.read_only
        html = self.env.get_template(template).render(
            root=request.scope.get("root_path", ""), title=self.title, principal=p, can_act=can_act,
            read_only=self.read_only, csrf=csrf.token(self.secret, p.name) if p else "", done=_done(request),
            nav=template.split(".")[0], **ctx)
        return HTMLResponse(html, status)

    def refused(self, request: Request, e: Refused) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 and self.login_token else None
        if _wants_json(request) or "/api/" in request.url.path:
            return JSONResponse({"error": e.reason}, e.status, headers=headers)
        resp = self.page(request, "error.html", e.status, reason=e.reason, code=e.status,
                         login=e.status == 401 and self.login_token is not None)
        resp.headers.update(headers or {})
        return resp

    def guard(self, need: str, handler: Callable[..., Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                await self.principal(request, need)
                return await handler(request)
            except Refused as e:
                return self.refused(request, e)
            except params.BadParam as e:
                return self.refused(request, Refused(400, str(e)))
            except NotFound as e:
                return self.refused(request, Refused(404, str(e)))
            except BadInput as e:
                return self.refused(request, Refused(400, str(e)))
            except Unavailable as e:
                return self.refused(request, Refused(503, str(e)))
        return endpoint

    async def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kw))

    def history(self, **kw: Any) -> Any:
        """``Client.history``; the filters only a job hash answers (file, started_*) walk the hashes
        of the narrowest index (every finished job without status, user or kind): at most WALKS of
        those run at once, the rest are a 503 rather than a pile of threads each walking Redis."""
        if kw.get("file") is None and kw.get("started_after") is None and kw.get("started_before") is None:
            return self.client.history(**kw)
        if not self.walks.acquire(blocking=False):
            raise Unavailable("busy: other history searches by file or start time are running; narrow this one "
                              "by state, user or kind, or try again")
        try:
            return self.client.history(**kw)
        finally:
            self.walks.release()

    # --- JSON ----------------------------------------------------------------------------------------

    async def api_status(self, request: Request) -> Response:
        return Response(await self.call(self._read_status), media_type="application/json")

    async def api_history(self, request: Request) -> Response:
        kw = params.history_query(request.query_params, max_page_size=params.API_MAX_PAGE_SIZE)
        page = await self.call(self.history, **kw)
        return Response(_json.encode(self._redacted(page)), media_type="application/json")

    def _redacted(self, page: Any) -> Any:
        items = [msgspec.structs.replace(j, payload=self.redact(j.payload)) for j in page.items]
        return msgspec.structs.replace(page, items=items)

    # --- pages ---------------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        if _wants_json(request):
            return await self.api_status(request)
        try:
            st = msgspec.to_builtins(await self.call(self.client.status))
        except Unavailable as e:
            st = {"error": str(e), "slots": [], "redis_ok": False}
        try:
            failures = (await self.call(self.client.history, status=["failed"], page_size=FAILURES_SHOWN)).items
        except Unavailable:
            failures = []
        return self.page(request, "overview.html", st=st, failures=failures,
                         local=st.get("pid") is not None)

    async def runs_page(self, request: Request) -> Response:
        q = params.runs_query(request.query_params)
        rows = await self.call(self.client.runs, **q)
        return self.page(request, "runs.html", rows=rows, q=q, states=params.RUN_STATES)

    async def run_page(self, request: Request) -> Response:
        run = await self.call(self.client.run, request.path_params["run_id"])
        return self.page(request, "run.html", run=run)

    async def run_events(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        since = request.headers.get("last-event-id") or request.query_params.get("since") or None
        events = self.client.aevents(run_id, since=since)
        try:
            first = await events.__anext__()  # an unknown run is a 404 before the stream starts
        except StopAsyncIteration:
            return Response(status_code=204)  # resumed after the run's end: EventSource stops
        return StreamingResponse(live.run_stream(events, first), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    async def live_status(self, request: Request) -> Response:
        return StreamingResponse(live.status_stream(self.hub), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    async def history_page(self, request: Request) -> Response:
        kw = params.history_query(request.query_params, max_page_size=params.HTML_MAX_PAGE_SIZE)
        page = await self.call(self.history, **kw)
        form = {k: request.query_params.get(k, "") for k in (*params.TEXT_FILTERS, *params.TIME_FILTERS)}
        pages = max(1, -(-page.total // page.page_size))
        return self.page(request, "history.html", page=page, form=form, states=params.FINAL_STATES,
                         chosen=kw["status"], pages=pages, link=_pager(request))

    async def job_page(self, request: Request) -> Response:
        job = await self.call(self.client.job, request.path_params["job_id"])
        markdown = md_error = None
        if job.kind == "parse_markdown" and job.state in ("completed", "skipped"):
            try:
                markdown = await self.call(self.client.markdown, job.id)
            except (BadInput, Unavailable, NotFound) as e:
                md_error = str(e)
        truncated = markdown is not None and len(markdown) > MARKDOWN_PREVIEW
        return self.page(request, "job.html", job=job, payload=self.redact(job.payload), timings=formats.timings(job),
                         markdown=markdown[:MARKDOWN_PREVIEW] if markdown else markdown, truncated=truncated,
                         md_error=md_error, final=job.state in params.FINAL_STATES)

    # --- actions -------------------------------------------------------------------------------------

    async def act(self, request: Request, action: str, target: str, do: Callable[[], Any], back: str) -> Response:
        """The common path of every action: permission, read-only, CSRF, do it, log, count, answer."""
        p: Principal = request.state.principal
        if self.read_only:
            raise Refused(403, "this admin web is read-only")
        form = await _form(request)
        why = csrf.check(request, self.secret, p.name, form.get(csrf.FIELD))
        if why:
            log.warning("web action refused", extra={"action": action, "target": target, "principal": p.name,
                                                     "reason": why})
            self._count(action, "refused")
            raise Refused(403, f"refused: {why}")
        try:
            result = await self.call(do, form)
        except (BadInput, NotFound, Unavailable) as e:
            log.warning("web action failed: %s %s by %s: %s", action, target, p.name, e,
                        extra={"action": action, "target": target, "principal": p.name})
            self._count(action, "error")
            raise
        outcome = getattr(result, "outcome", None) or "done"
        log.info("web action: %s %s by %s: %s", action, target, p.name, outcome,
                 extra={"action": action, "target": target, "principal": p.name, "outcome": outcome})
        self._count(action, "ok")
        if _wants_json(request):
            return Response(_json.encode({"action": action, "target": target, "result": result}),
                            media_type="application/json")
        sep = "&" if "?" in back else "?"
        return RedirectResponse(f"{request.scope.get('root_path', '')}{back}{sep}done={action}:{outcome}", 303)

    def _count(self, action: str, outcome: str) -> None:
        if self.actions is not None:
            self.actions.labels(action=action, outcome=outcome).inc()

    async def cancel_job(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        return await self.act(request, "cancel_job", jid, lambda f: self.client.cancel(jid),
                              f"/jobs/{_q(jid)}")

    async def cancel_run(self, request: Request) -> Response:
        rid = request.path_params["run_id"]
        return await self.act(request, "cancel_run", rid, lambda f: self.client.cancel_run(rid), f"/runs/{_q(rid)}")

    async def retry_run(self, request: Request) -> Response:
        rid = request.path_params["run_id"]
        return await self.act(request, "retry_run", rid, lambda f: self.client.retry_run(rid), f"/runs/{_q(rid)}")

    async def drain(self, request: Request) -> Response:
        return await self.act(request, "drain", "pool", lambda f: self.client.drain(), "/")

    async def scale(self, request: Request) -> Response:
        def do(form: dict[str, str]) -> Any:
            try:
                n = int(form.get("workers", ""))
            except ValueError:
                raise BadInput("workers: a whole number from 1 to 4") from None
            if not 1 <= n <= 4:
                raise BadInput("workers: a whole number from 1 to 4")
            return self.client.scale(n)
        return await self.act(request, "scale", "pool", do, "/")

    # --- the standalone server's login, and metrics ---------------------------------------------------

    async def login(self, request: Request) -> Response:
        if self.login_token is None:
            raise Refused(404, "no login here: the host application authenticates")
        why = csrf.same_origin(request)
        if why:
            raise Refused(403, f"refused: {why}")
        form = await _form(request)
        if not hmac.compare_digest(form.get("token", "").encode(), self.login_token.encode()):
            log.warning("web login refused: wrong token")
            raise Refused(401, "wrong token")
        root = request.scope.get("root_path", "")
        resp = RedirectResponse(f"{root}/", 303)
        resp.set_cookie(SESSION_COOKIE, session_value(self.login_token), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path=root or "/")
        return resp

    async def metrics(self, request: Request) -> Response:
        try:
            from prometheus_client import REGISTRY, generate_latest
            from prometheus_client.exposition import CONTENT_TYPE_LATEST
        except ImportError:
            raise Refused(404, "prometheus-client is not installed") from None
        return Response(generate_latest(self.registry or REGISTRY), media_type=CONTENT_TYPE_LATEST)

    # --- the app -------------------------------------------------------------------------------------

    def routes(self) -> list[Any]:
        g = self.guard

        async def login(request: Request) -> Response:
            try:
                return await self.login(request)
            except Refused as e:
                return self.refused(request, e)

        return [
            Route("/", g(VIEW, self.overview), name="overview"),
            Route("/api/status", g(VIEW, self.api_status)),
            Route("/api/history", g(VIEW, self.api_history)),
            Route("/live/status", g(VIEW, self.live_status)),
            Route("/runs", g(VIEW, self.runs_page)),
            Route("/runs/{run_id}", g(VIEW, self.run_page)),
            Route("/runs/{run_id}/events", g(VIEW, self.run_events)),
            Route("/history", g(VIEW, self.history_page)),
            Route("/jobs/{job_id}", g(VIEW, self.job_page)),
            Route("/jobs/{job_id}/cancel", g(ACT, self.cancel_job), methods=["POST"]),
            Route("/runs/{run_id}/cancel", g(ACT, self.cancel_run), methods=["POST"]),
            Route("/runs/{run_id}/retry", g(ACT, self.retry_run), methods=["POST"]),
            Route("/pool/drain", g(ACT, self.drain), methods=["POST"]),
            Route("/pool/scale", g(ACT, self.scale), methods=["POST"]),
            Route("/login", login, methods=["POST"]),
            Route("/metrics", g(VIEW, self.metrics)),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]


def create_app(client: Any, *, auth: Auth, read_only: bool = False, redact: Redact | None = None,
               interval: float = 1.0, registry: Any = None, title: str = "tender-pool") -> Any:
    """The admin web for ``client`` (a ``tender_pool.client.Client``) as an ASGI app.

    ``auth(request)`` (sync or async) → ``Principal`` or None; there is no default (deny by
    default): pass your own, ``local_only`` or ``allow_all_insecure``. ``read_only`` takes every
    action away (403, no buttons) whatever the principal may do. ``redact(payload) -> payload``
    masks what a job's payload shows (default ``mask_secrets``). ``interval``: seconds between
    status readings while someone watches. ``registry``: the Prometheus registry the action counter
    goes to (default prometheus-client's global one, if it is installed)."""
    if not callable(auth):
        raise TypeError("create_app needs auth=: a callable, local_only, or allow_all_insecure")
    d = Dashboard(client, auth=auth, read_only=read_only, redact=redact, interval=interval, registry=registry,
                  title=title)
    app = Starlette(routes=d.routes())
    app.state.dashboard = d
    return SecurityHeaders(app, d)


# --- helpers -----------------------------------------------------------------------------------------


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _done(request: Request) -> str | None:
    d = request.query_params.get("done")
    return d if d and DONE.fullmatch(d) else None


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body (actions carry a token and at most a number), capped at MAX_FORM."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Refused(413, "form too large")
    if ctype != "application/x-www-form-urlencoded" or not body:
        return {}
    return {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}


def _pager(request: Request) -> Callable[[int], str]:
    """The history URL with ``page`` replaced: every filter kept, so each page is bookmarkable."""
    base = [(k, v) for k, v in request.query_params.multi_items() if k != "page"]
    root = request.scope.get("root_path", "")

    def link(page: int) -> str:
        return f"{root}/history?" + urllib.parse.urlencode([*base, ("page", str(page))])
    return link
