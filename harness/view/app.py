"""`python -m harness.view <run or sweep dir ...>`: a local web app over the Parquet tables of runs and
sweeps, finished or still writing.

Pages (HTML; each has a JSON twin under /api/ that returns the rows it shows):
- `/` runs and jobs, live: each job's status (manifest.json) and each agent run's episodes done of
  planned, success, tokens, dollars (unknown where any call had no price, never summed as 0) and
  errors; the table refreshes every two seconds as part files land;
- `/compare?run=<job>|<run_id>...` the report's main table and accuracy at matched spend, computed
  by harness.report's own functions on the selected runs' episodes, with its cost-accuracy figure;
- `/episodes?variant=&seed=&env=&family=&success=&error=&purpose=&text=&page=` filtered, paginated;
- `/episode?dir=<job>&id=<episode_id>` one episode: task, reference, attempts, steps, every model
  call with its transcript, and the learnt items it retrieved and wrote;
- `/learnt?dir=<job>&run=<run_id>[&at=<position>]` what one agent run learnt, by stream position;
- `/report/<n>` each report.html found below the paths (python -m harness.report), served as is.

Why DuckDB, not polars' lazy scans: the viewer answers many small, different questions per page
(one episode's calls joined with their transcripts, the distinct values of five columns, a count and
one page of a filter) over files that change while it runs. DuckDB plans each SQL query with
projection and filter pushdown into the Parquet scan (row groups skipped on their min/max), holds to
a memory limit of its own and spills past it, and runs top-N (`ORDER BY ... LIMIT`) without keeping
every row; its queries are plain text, so a scan over whatever files exist at that moment is rebuilt
for each request at no cost. Polars' lazy scans push projections and filters down too, but collect
whole results into memory and have no memory cap, and the report's statistics (which are polars
functions) are then fed with DuckDB's results as polars frames (Arrow, no copy).

Plain standard library HTTP (ThreadingHTTPServer): no framework to install, one thread per request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from harness.view.learnt import learnt_page
from harness.view.learnt_queries import learnt_state
from harness.view.pages import (
    compare_page,
    episode_page,
    episodes_page,
    message_page,
    runs_fragment,
    runs_page,
)
from harness.view.queries import EpisodeFilter, episode_detail, list_episodes, runs_overview
from harness.view.store import BadParameter, Store, TooLarge, ViewError

DEFAULT_PORT = 8000
FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1 1">'
    b'<rect width="1" height="1" fill="#24292f"/></svg>'
)

Reply = tuple[int, str, bytes]
"""HTTP status, content type, body."""


class Viewer:
    """Answers each route from the tables; knows nothing of HTTP beyond status codes."""

    def __init__(self, roots: list[Path]) -> None:
        self.store = Store(roots)
        self._plotly_js: bytes | None = None

    def reports(self) -> list[tuple[str, str]]:
        """(name, URL) of every report.html below the roots, for the navigation."""
        return [(name, f"/report/{i}") for i, (name, _) in enumerate(self._report_files())]

    def _report_files(self) -> list[tuple[str, Path]]:
        found: list[tuple[str, Path]] = []
        seen: set[Path] = set()
        candidates = [*self.store.roots, *(d.path for d in self.store.run_dirs())]
        for directory in candidates:
            path = directory / "report.html"
            if path.is_file() and path not in seen:
                seen.add(path)
                relative = "." if directory in self.store.roots else directory.name
                found.append((f"report.html ({relative})", path))
        return found

    def route(self, path: str, query: dict[str, list[str]]) -> Reply:
        one = {k: v[-1] for k, v in query.items()}
        pages: dict[str, Callable[[], Reply]] = {
            "/": lambda: self.html(
                runs_page(runs_overview(self.store), [str(r) for r in self.store.roots], self.reports())
            ),
            "/fragment/runs": lambda: self.html(runs_fragment(runs_overview(self.store))),
            "/api/runs": lambda: self.json(runs_overview(self.store)),
            "/episodes": lambda: self.html(episodes_page(self._episodes(one), self.reports())),
            "/api/episodes": lambda: self.json(self._episodes(one)),
            "/episode": lambda: self.html(episode_page(self._episode(one), self.reports())),
            "/api/episode": lambda: self.json(self._episode(one)),
            "/learnt": lambda: self.html(learnt_page(self._learnt(one), self.reports())),
            "/api/learnt": lambda: self.json(self._learnt(one)),
            "/compare": lambda: self._compare(query.get("run", []), one.get("reference", "baseline")),
            "/api/compare": lambda: self._compare(
                query.get("run", []), one.get("reference", "baseline"), as_json=True
            ),
            "/static/plotly.js": self._plotly,
            # Asked for by every page that names no icon (report.html): answered, not a console error.
            "/favicon.ico": lambda: (HTTPStatus.OK, "image/svg+xml", FAVICON),
        }
        if path in pages:
            return pages[path]()
        if path.startswith("/report/"):
            return self._report(path.removeprefix("/report/"))
        raise NotFound(f"no page {path}")

    @staticmethod
    def html(text: str) -> Reply:
        return HTTPStatus.OK, "text/html; charset=utf-8", text.encode()

    @staticmethod
    def json(value: Any) -> Reply:
        return HTTPStatus.OK, "application/json", json.dumps(value).encode()

    def _episodes(self, query: dict[str, str]) -> dict[str, Any]:
        return list_episodes(self.store, EpisodeFilter.from_query(query))

    def _episode(self, query: dict[str, str]) -> dict[str, Any]:
        return episode_detail(self.store, required(query, "dir"), required(query, "id"))

    def _learnt(self, query: dict[str, str]) -> dict[str, Any]:
        page, at = whole(query.get("page", "1"), "page"), query.get("at", "")
        return learnt_state(
            self.store,
            required(query, "dir"),
            required(query, "run"),
            page,
            whole(at, "at") if at else None,
            query.get("item") or None,
        )

    def _compare(self, selection: list[str], reference: str, as_json: bool = False) -> Reply:
        from harness.view.selection_report import comparison  # loads the report's statistics: only when asked

        compared = comparison(self.store, selection, reference, with_figures=not as_json)
        if as_json:
            return self.json(compared.as_json())
        return self.html(
            compare_page(compared.headline, compared.sections, compared.figures, selection, self.reports())
        )

    def _plotly(self) -> Reply:
        if self._plotly_js is None:
            from plotly.offline import get_plotlyjs

            self._plotly_js = get_plotlyjs().encode()
        return HTTPStatus.OK, "application/javascript", self._plotly_js

    def _report(self, index: str) -> Reply:
        files = self._report_files()
        if not index.isdigit() or int(index) >= len(files):
            raise NotFound(f"no report {index}")
        return HTTPStatus.OK, "text/html; charset=utf-8", files[int(index)][1].read_bytes()


class NotFound(ViewError):
    pass


def required(query: dict[str, str], name: str) -> str:
    if not query.get(name):
        raise BadParameter(f"missing ?{name}=")
    return query[name]


def whole(text: str, name: str) -> int:
    if not text.isdigit():
        raise BadParameter(f"{name} must be a whole number, not {text!r}")
    return int(text)


def make_handler(viewer: Viewer, quiet: bool = True) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            api = url.path.startswith("/api/")
            try:
                status, content_type, body = viewer.route(url.path, parse_qs(url.query))
            except TooLarge as error:
                status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
                content_type, body = error_body(api, "Too large to compare here", str(error))
            except BadParameter as error:
                status = HTTPStatus.BAD_REQUEST
                content_type, body = error_body(api, "Bad request", str(error))
            except ViewError as error:  # bad input: a one-line page (or JSON) saying what, never a traceback
                status = HTTPStatus.NOT_FOUND
                content_type, body = error_body(api, "Not found", str(error))
            except Exception as error:  # a bug: the line here, the traceback on the viewer's stderr
                traceback.print_exc()
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                content_type, body = error_body(api, "Error", f"{type(error).__name__}: {error}")
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                if url.path == "/static/plotly.js":
                    self.send_header("Cache-Control", "max-age=86400")
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the browser went away mid-reply
                pass

        def log_message(self, format: str, *args: Any) -> None:
            if not quiet:
                super().log_message(format, *args)

    return Handler


def error_body(api: bool, title: str, message: str) -> tuple[str, bytes]:
    if api:
        return "application/json", json.dumps({"error": message}).encode()
    return "text/html; charset=utf-8", message_page(title, message).encode()


def free_port(preferred: int = DEFAULT_PORT) -> int:
    """`preferred` when nothing listens on it, else any free port."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]


def serve(roots: list[Path], port: int | None = None, quiet: bool = True) -> ThreadingHTTPServer:
    """A started viewer (serving on a thread of its own); `server.shutdown()` stops it."""
    viewer = Viewer(roots)
    server = ThreadingHTTPServer(
        ("127.0.0.1", free_port() if port is None else port), make_handler(viewer, quiet)
    )
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="harness-view", daemon=True).start()
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.view", description=" ".join(
        __doc__.split("\n\n")[0].split()))  # the docstring's first paragraph: a whole sentence
    parser.add_argument("paths", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port on 127.0.0.1 (default {DEFAULT_PORT}, or a free one when it is taken; 0: any)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    try:
        server = serve(args.paths, args.port, quiet=not args.verbose)
    except ViewError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the port is taken (an explicit --port)
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"harness view: {url_of(server)}  (Ctrl-C stops it)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
