"""Every module of every distribution in the env, and the job's own modules, imported live with the CANN
environment sourced (roles/verify/files/import_sweep.py, the verify role's sweep, with the same arguments). Cheap
while the env is unchanged: the sweep reprints the verdict it kept with the env's fingerprint (the size and mtime
of every installed file) and imports again only when the fingerprint changed."""

import shlex

from dapo_ops.audit.fact import Fact
from dapo_ops.stack.imports import SWEEP_SCRIPT, parse_verdict

_RUN = 'if [ -r "$1" ]; then . "$1" >/dev/null 2>&1; fi; exec "$2" -c "$3" "${@:4}"'


def command(ctx) -> str:
    python = shlex.quote(ctx.python)
    arguments = " ".join(shlex.quote(a) for a in ctx.import_sweep_args)
    return (f"if [ -x {python} ]; then bash -c {shlex.quote(_RUN)} sweep {shlex.quote(ctx.env_script)} {python} "
            f"{shlex.quote(SWEEP_SCRIPT.read_text())} {arguments}; else (exit 3); fi")


def parse(output: str) -> dict:
    return parse_verdict(output).as_dict()


FACT = Fact(
    name="import_sweep",
    description="every installed distribution's modules and the job's own modules, imported live in the env "
                "(the last verdict reused while the env is unchanged)",
    command=command,
    parse=parse,
    absent_codes=(3,),  # no environment
    beside_tools=True,
)
