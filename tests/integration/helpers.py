from dapo_ops.fleet.ssh import run_on
from dapo_ops.inventory import load_inventory


def hosts():
    return {h.name: h for h in load_inventory().hosts}


def sh(host, command, timeout=60, ok=True):
    result = run_on(host, command, timeout=timeout)
    assert result.error is None, result.error
    if ok:
        assert result.exit_code == 0, f"{command!r} on {host.name}: {result.stdout}{result.stderr}"
    return result


def sigint_as_at_a_terminal():
    """Popen preexec_fn: the child takes SIGINT as a process started from a terminal does. A test runner started
    as a background job (`cmd &` in a script) ignores SIGINT, and an ignored signal stays ignored across exec, so
    without this a Ctrl-C test would test nothing but that inheritance."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
