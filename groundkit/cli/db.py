"""``groundkit db``: the embedded PostgreSQL server."""

from __future__ import annotations

import typer

from groundkit import embedded
from groundkit.cli._common import handle_errors, out
from groundkit.config import Settings

app = typer.Typer(help="Show or manage the embedded PostgreSQL server.", no_args_is_help=True,
                  rich_markup_mode="markdown")


@app.command()
@handle_errors
def url() -> None:
    """Print the embedded server's DSN (starting it if needed)."""
    print(embedded.ensure_server(Settings.from_env()))


@app.command()
@handle_errors
def status() -> None:
    """Show where the embedded server's data lives and whether it runs."""
    settings = Settings.from_env()
    st = embedded.status(settings)
    out.print(f"data directory: {st.data_dir}")
    out.print(f"initialised:    {'yes' if st.initialised else 'no'}")
    out.print(f"running:        {'yes (pid ' + str(st.pid) + ')' if st.running else 'no'}")
    if st.state is not None:
        out.print(f"state:          {st.state}")
    if st.socket_dir is not None:
        out.print(f"socket dir:     {st.socket_dir}")
    if settings.dsn:
        out.print("note: GROUNDKIT_DSN is set, so groundkit uses that server, not this one")


@app.command()
@handle_errors
def stop() -> None:
    """Stop the embedded server (its data stays)."""
    if embedded.stop(Settings.from_env()):
        out.print("embedded PostgreSQL stopped")
    else:
        out.print("embedded PostgreSQL was not running")
