"""``lemonpack serve``: the OpenAI-compatible server (parse and print; the work is in
:mod:`lemonpack.server`)."""

from __future__ import annotations

import typer

from lemonpack.cli._app import app, err_console
from lemonpack.cli.stop_signals import StopSignals


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
) -> int:
    """Serve registered models over an OpenAI-compatible API, starting engines on demand."""
    from lemonpack.hosts import is_loopback
    from lemonpack.runtime.engines import Engines
    from lemonpack.runtime.runner import Runner
    from lemonpack.server.app import Server, ServerConfig
    from lemonpack.server.catalog import Catalog
    from lemonpack.server.main import bind, configure_logging, parse_listen
    from lemonpack.server import main as srv

    from lemonpack.runtime.memory import default_budget, parse_size

    try:
        budget = parse_size(memory_budget) if memory_budget is not None else default_budget()
    except Exception as e:  # LemonpackError: a bad size
        err_console.print(f"error: --memory-budget: {e}", markup=False)
        return 2
    host, port_n = parse_listen(port, host)
    sock = bind(host, port_n)
    unconfigure_logging = configure_logging(json_logs)
    engines = Engines(subreaper=True, sentinel=True)
    engines.cleanup_leftovers()
    catalog = Catalog(avoid_ports=frozenset({port_n}), model_files=is_loopback(host)).start()
    server = Server(catalog, Runner(catalog.plan, engines),
                    ServerConfig(max_in_flight=max_in_flight, ttl=ttl, soft_idle=soft_idle, load_timeout=load_timeout,
                                 memory_budget=budget, metrics_remote=metrics_remote),
                    )
    try:
        with StopSignals() as stop:
            srv.serve(server, sock, stop, on_ready=lambda: err_console.print(
                f"listening on http://{host}:{port_n} (OpenAI API under /v1 and /api/v1)", markup=False))
    finally:
        engines.close()
        unconfigure_logging()
    err_console.print("stopped", markup=False)
    return 0


__all__ = ["serve"]
