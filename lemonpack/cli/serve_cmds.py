"""``lemonpack serve``: the OpenAI-compatible server (parse and print; the work, the wiring and
the loopback rule are :func:`lemonpack.server.main.run`)."""

from __future__ import annotations

import typer

from lemonpack.cli._app import POLICY_OPTION, REGISTRIES_D_OPTION, app, err_console


@app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
    port: str = typer.Option("8000", "--port", help="PORT, :PORT or HOST:PORT (default 8000)."),
    max_in_flight: int = typer.Option(64, "--max-in-flight", min=1,
                                      help="Requests in flight per model; over it, HTTP 429 with Retry-After."),
    json_logs: bool = typer.Option(False, "--json-logs", help="One JSON object per log line."),
    ttl: float | None = typer.Option(None, "--ttl", min=0.1, metavar="SECONDS",
                                     help="Unload a model idle this long since the end of its last request."),
    soft_idle: float | None = typer.Option(None, "--soft-idle", min=0.1, metavar="SECONDS",
                                           help="Call the recipe's downsize_endpoint once a model is idle this long."),
    metrics_remote: bool = typer.Option(False, "--metrics-remote",
                                        help="Answer GET /metrics to non-loopback clients too."),
    load_timeout: float | None = typer.Option(None, "--load-timeout", min=0.1, metavar="SECONDS",
                                              help="A request waiting longer for its engine gets HTTP 503."),
    memory_budget: str | None = typer.Option(None, "--memory-budget", metavar="SIZE",
                                             help="Memory engines may hold together (24GiB, 512MiB); default: "
                                                  "the host's available RAM minus 1 GiB."),
    engine_output: bool = typer.Option(True, "--engine-output/--no-engine-output",
                                       help="Show the engines' output lines on stderr, prefixed [MODEL]."),
    max_connections: int = typer.Option(1024, "--max-connections", min=1, metavar="N",
                                        help="Client connections open at once (lowered to fit the open-files "
                                             "limit); at the cap the longest idle one is closed, and when all are "
                                             "busy a new one gets HTTP 503."),
    header_timeout: float = typer.Option(10.0, "--header-timeout", min=0.1, metavar="SECONDS",
                                         help="A connection must send a complete request head within this; "
                                              "else 408 and closed."),
    keepalive_timeout: float = typer.Option(75.0, "--keepalive-timeout", min=0.1, metavar="SECONDS",
                                            help="Close a kept-alive connection idle this long between requests."),
    body_timeout: float = typer.Option(60.0, "--body-timeout", min=0.1, metavar="SECONDS",
                                       help="Longest wait for the next bytes of a request body; else HTTP 408."),
    body_budget: str = typer.Option("256MiB", "--body-budget", metavar="SIZE",
                                    help="Request bodies all requests may hold in memory together; past it "
                                         "HTTP 503 (413 for one body larger than it)."),
    drain_timeout: float = typer.Option(30.0, "--drain-timeout", min=0, metavar="SECONDS",
                                        help="Requests in flight may finish this long when a model gives way "
                                             "(unload, removal) or serve stops; then they are cut."),
    upstream_read_timeout: float | None = typer.Option(None, "--upstream-read-timeout", min=0.1, metavar="SECONDS",
                                                       help="An engine silent this long (before its answer or "
                                                            "mid-body) fails the request: 504, or a cut stream."),
    queue_timeout: float | None = typer.Option(None, "--queue-timeout", min=0.1, metavar="SECONDS",
                                               help="A request whose model does not fit in memory now waits this "
                                                    "long for memory to free (first come, first started), then "
                                                    "HTTP 503; default: 503 at once."),
    queue_limit: int = typer.Option(64, "--queue-limit", min=1, metavar="N",
                                    help="Requests waiting for memory at most (--queue-timeout); past it, 503 "
                                         "at once."),
    status_remote: bool = typer.Option(False, "--status-remote",
                                       help="Answer the status page (GET /, /v1/status) to non-loopback clients "
                                            "too."),
    policy: str | None = POLICY_OPTION,
    registries_d: str | None = REGISTRIES_D_OPTION,
) -> int:
    """Serve registered models over an OpenAI-compatible API, starting engines on demand.

    Stopping: SIGTERM or SIGINT stops listening and lets requests in flight finish within
    --drain-timeout, then cuts them; a second SIGTERM/SIGINT cuts them at once. Exit code 0
    when every request finished, 1 when some were cut, 2 for a usage error.
    """
    options = dict(locals())  # every parameter is the ServeConfig field of its name
    from lemonpack.server.main import ServeConfig, run

    return run(ServeConfig(**options), notice=lambda text: err_console.print(text, markup=False))


__all__ = ["serve"]
