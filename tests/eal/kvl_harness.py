# SPDX-License-Identifier: BSD-3-Clause
"""What every eal test program shares: processes with EAL arguments, each in its own
--file-prefix and RUNTIME_DIRECTORY, their output by line, the telemetry socket, failures that
say what was expected and what was seen (with every process involved), and main().

The test programs import it from their own folder (tests/eal), whatever the working folder.
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

KVL_SRC = os.environ.get("KVL_SRC") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(KVL_SRC, "tools"))
import kvlane_telemetry as kt  # noqa: E402  (path set just above)

DEFAULT_INI = os.path.join(KVL_SRC, "config", "default.ini")
EAL = ["-l", "0-1", "--no-huge", "--no-pci"]  # and -m, --file-prefix per process
READY_TIMEOUT_S = 15      # kvlaned start until ready and listening
STOP_TIMEOUT_S = 10       # signal until exit
TELEMETRY_TIMEOUT_S = 5.0  # the socket appearing; then each command's reply
KILL_GRACE_S = 5          # past the scenario's limit, if the main thread cannot take SIGALRM
LISTEN_ANY = "control.listen=127.0.0.1:0"
LISTEN_RE = r"^\s*control: listening on (\S+) "
READY_RE = r"^kvlaned: ready$"


# ---- failures ----

class Fail(Exception):
    """A failed expectation: what was expected, what was seen, and the processes involved."""


def indent(text, prefix="    | "):
    if not text:
        return f"{prefix}(nothing)\n"
    return "".join(prefix + line + "\n" for line in text.rstrip("\n").split("\n"))


def describe(*subjects):
    """What each of @subjects (a Proc, a Run, None) ran and printed."""
    return "".join(s.describe() for s in subjects if s is not None)


def check(cond, what, expected, seen, *subjects):
    if not cond:
        raise Fail(f"{what}\n  expected: {expected}\n  seen:     {seen}\n" + describe(*subjects))


def check_eq(seen, expected, what, *subjects):
    check(seen == expected, what, repr(expected), repr(seen), *subjects)


def log(msg):
    print(f"  {msg}", flush=True)


def wait_for(cond, timeout, interval=0.05):
    """Poll cond() until it returns a true value or @timeout s pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# ---- processes ----

class Proc:
    """A process in the background (kvlaned, a tool), its stdout and stderr collected by line.
    Registered with @ctx, which kills it at the end of the scenario."""

    def __init__(self, ctx, argv, rundir, prefix, tag, stdin=subprocess.DEVNULL,
                 new_session=False):
        self.ctx, self.argv, self.rundir, self.prefix, self.tag = ctx, argv, rundir, prefix, tag
        self.out, self.err = [], []
        self.cond = threading.Condition()
        self.rc = None
        self.t0 = time.monotonic()
        env = dict(os.environ, RUNTIME_DIRECTORY=rundir)
        self.proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, text=True,
                                     errors="replace", start_new_session=new_session)
        self.pid = self.proc.pid
        self.readers = [threading.Thread(target=self._read, args=(f, buf), daemon=True)
                        for f, buf in ((self.proc.stdout, self.out),
                                       (self.proc.stderr, self.err))]
        for t in self.readers:
            t.start()
        ctx.procs.append(self)

    def _read(self, f, buf):
        for line in f:
            with self.cond:
                buf.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    @property
    def stdout(self):
        with self.cond:
            return "\n".join(self.out)

    @property
    def stderr(self):
        with self.cond:
            return "\n".join(self.err)

    @property
    def socket_path(self):
        return kt.socket_path(self.prefix, self.rundir)

    def running(self):
        return self.proc.poll() is None

    def describe(self):
        rc = self.proc.poll()
        state = f"running (pid {self.pid})" if rc is None else f"{rc} (pid {self.pid})"
        return (f"  {self.tag}: RUNTIME_DIRECTORY={self.rundir} {shlex.join(self.argv)}\n"
                f"  exit status: {state}\n"
                f"  --- stdout ---\n{indent(self.stdout)}"
                f"  --- stderr ---\n{indent(self.stderr)}")

    def wait_line(self, pattern, timeout, stream="out", what=None):
        """The first match of @pattern (re.search) in a line of @stream ("out" or "err");
        fail on timeout, or once it exited and all its output is read."""
        rx = re.compile(pattern)
        buf = self.out if stream == "out" else self.err
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in buf:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                done = self.proc.poll() is not None and not any(t.is_alive()
                                                                for t in self.readers)
                if left <= 0 or done:
                    break
                self.cond.wait(min(left, 0.1))
        why = "it exited" if self.proc.poll() is not None else f"nothing within {timeout} s"
        raise Fail(f"{what or self.tag + ': a line on std' + stream}\n  expected: a line "
                   f"matching {pattern!r} on std{stream}\n  seen:     {why}\n" + self.describe())

    def send(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def wait_exit(self, timeout=STOP_TIMEOUT_S, after=""):
        """Its exit status, once it exits within @timeout s (@after: of what, for the
        message); past that, killed and a Fail."""
        try:
            self.rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail(f"{self.tag}: exit\n  expected: it exits within {timeout} s{after}\n"
                       f"  seen:     still running; killed it\n" + self.describe()) from None
        for t in self.readers:
            t.join(2.0)
        return self.rc

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        """Signal, wait (killed past @timeout), expect exit 0."""
        name = signal.Signals(sig).name
        self.send(sig)
        rc = self.wait_exit(timeout, f" of {name}")
        check_eq(rc, 0, f"{self.tag}: exit status after {name}", self)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def fds(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def telemetry(self, timeout=TELEMETRY_TIMEOUT_S):
        """A connection to its telemetry socket, once the socket is there (polled, with a
        deadline); closed by the ctx at the end."""
        path = self.socket_path
        ok = kt.wait_for_socket(path, timeout, alive=self.running)
        check(ok, f"{self.tag}: telemetry socket", f"{path} within {timeout} s",
              "no socket" + ("" if self.running() else " (it exited)"), self)
        c = kt.TelemetryClient(timeout=TELEMETRY_TIMEOUT_S)
        try:
            c.connect(path, wait=2.0)
        except kt.TelemetryError as e:
            raise Fail(f"{self.tag}: telemetry connect\n  expected: a connection\n"
                       f"  seen:     {e}\n" + self.describe()) from e
        self.ctx.clients.append(c)
        return c


class Run:
    """A command run to its end, in its own session, or killed with its children at
    @timeout (then timed_out is true: the caller decides whether that fails). Without
    @rundir, RUNTIME_DIRECTORY is taken out of its environment; @input goes to its stdin;
    with @merge, stderr goes into stdout (and stderr is None)."""

    def __init__(self, argv, rundir, timeout, cwd=None, input=None, merge=False):
        self.argv, self.rundir, self.cwd = argv, rundir, cwd
        env = dict(os.environ)
        if rundir:
            env["RUNTIME_DIRECTORY"] = rundir
        else:
            env.pop("RUNTIME_DIRECTORY", None)
        t0 = time.monotonic()
        self.timed_out = False
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT if merge else subprocess.PIPE, env=env,
                             text=True, errors="replace", cwd=cwd, start_new_session=True)
        self.pid = p.pid
        try:
            self.stdout, self.stderr = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            os.killpg(p.pid, signal.SIGKILL)  # its own session: its children too
            self.stdout, self.stderr = p.communicate()
        self.rc = p.returncode
        self.secs = time.monotonic() - t0

    def describe(self):
        state = f"killed after {self.secs:.1f} s (deadline)" if self.timed_out else \
            f"{self.rc} (after {self.secs:.2f} s)"
        command = shlex.join(self.argv)
        if self.rundir:
            command = f"RUNTIME_DIRECTORY={self.rundir} {command}"
        if self.cwd:
            command = f"(cd {self.cwd} && {command})"
        if self.stderr is None:
            output = f"  --- output ---\n{indent(self.stdout)}"
        else:
            output = (f"  --- stdout ---\n{indent(self.stdout)}"
                      f"  --- stderr ---\n{indent(self.stderr)}")
        return f"  command: {command}\n  exit status: {state}\n{output}"


# ---- telemetry ----

def query(c, command, *procs):
    """The reply to @command (None included); a Fail naming @procs if there is none."""
    try:
        return c.command(command)
    except kt.TelemetryError as e:
        raise Fail(f"telemetry {command}\n  expected: a reply\n  seen:     {e}\n"
                   + describe(*procs)) from e


def cmd(c, command, *procs):
    """The reply to @command, which must not be null."""
    v = query(c, command, *procs)
    check(v is not None, f"telemetry {command}", "a value", "null", *procs)
    return v


def table_rows(value, columns, what, *procs):
    """Column form (a dict of equal-length arrays, with at least @columns) -> row dicts."""
    check(isinstance(value, dict), what, "a dict of arrays", repr(value), *procs)
    missing = [c for c in columns if c not in value]
    check(not missing, f"{what}: columns", columns, f"missing {missing}; got {list(value)}",
          *procs)
    if not value:
        return []
    lens = {k: len(v) if isinstance(v, list) else None for k, v in value.items()}
    check(len(set(lens.values())) == 1 and None not in lens.values(), f"{what}: column lengths",
          "every column an array of the same length", lens, *procs)
    n = next(iter(lens.values()))
    return [{k: value[k][i] for k in value} for i in range(n)]


# ---- a scenario ----

class Ctx:
    """One scenario: a temp dir, unique prefixes, and everything to clean up afterwards."""

    def __init__(self, scenario, kvlaned, name):
        self.scenario, self.kvlaned_exe = scenario, kvlaned
        self.tmp = tempfile.mkdtemp(prefix=f"kvl-{name}-{scenario}-")
        self.procs, self.clients = [], []  # clients: anything to close() (telemetry, sockets)
        self.n = 0

    def cleanup(self):
        for c in self.clients:
            c.close()
        for p in self.procs:
            p.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def kill_all(self):
        """SIGKILL to every process still running, without waiting (from any thread)."""
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.kill()

    def describe(self):
        return describe(*self.procs)

    def unique(self, tag):
        self.n += 1
        return f"kvl{os.getpid()}_{tag}{self.n}"

    def rundir(self, tag="run"):
        """A fresh, empty RUNTIME_DIRECTORY."""
        return tempfile.mkdtemp(prefix=f"{tag}-", dir=self.tmp)

    def kvlaned(self, tag, mem_mb=256, args=(), eal_extra=(), timeout=READY_TIMEOUT_S,
                new_session=False):
        """A kvlaned on default.ini (and @args after it) with a free control port, ready;
        its control address in .addr."""
        prefix = self.unique(tag)
        argv = [self.kvlaned_exe, *EAL, "-m", str(mem_mb), "--file-prefix", prefix,
                *eal_extra, "--", "-c", DEFAULT_INI, "--set", LISTEN_ANY, *args]
        p = Proc(self, argv, self.rundir(prefix), prefix, f"kvlaned {tag}",
                 new_session=new_session)
        p.wait_line(READY_RE, timeout, what=f"kvlaned {tag}: start-up")
        p.addr = p.wait_line(LISTEN_RE, 1, what=f"kvlaned {tag}: control address")[1]
        return p


def sets(*keys):
    """--set for each of @keys ("section.key=value")."""
    return [a for k in keys for a in ("--set", k)]


def main(argv, scenarios, limits, exe_names, make_ctx):
    """Run the scenario named by argv[1] with the executables that follow (@exe_names, for
    the usage line), within limits[scenario] seconds (@limits: a dict, or one number), in a
    make_ctx(scenario, *exes). Prints PASS or FAIL with the reason; returns the exit status."""
    if len(argv) != 2 + len(exe_names) or argv[1] not in scenarios:
        print(f"usage: {argv[0]} {{{'|'.join(scenarios)}}} {' '.join(exe_names)}",
              file=sys.stderr)
        return 1
    scenario = argv[1]
    exes = [os.path.abspath(a) for a in argv[2:]]
    # git keeps no mode but the x bit: a fresh clone has config/demo.secret at 0644, which
    # kvlaned refuses (make build chmods it; so do the tests, run from meson directly).
    demo_secret = os.path.join(KVL_SRC, "config", "demo.secret")
    if os.path.exists(demo_secret) and os.stat(demo_secret).st_mode & 0o077:
        os.chmod(demo_secret, 0o600)
    for exe in exes:
        if not os.access(exe, os.X_OK):
            print(f"FAIL {scenario}: {exe} is not an executable", file=sys.stderr)
            return 1
    limit = limits[scenario] if isinstance(limits, dict) else limits
    ctx = make_ctx(scenario, *exes)
    t0 = time.monotonic()

    def on_signal(sig, frame):
        raise Fail(f"interrupted: {signal.Signals(sig).name}"
                   + (f" (the scenario ran over its limit of {limit} s)"
                      if sig == signal.SIGALRM else "") + "\n" + ctx.describe())

    def overtime():
        # The main thread did not take SIGALRM: a hung step must not hang the suite either.
        print(f"FAIL {scenario}: over {limit} s and not interrupted; killing", flush=True)
        ctx.kill_all()
        os._exit(1)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, on_signal)
    backstop = threading.Timer(limit + KILL_GRACE_S, overtime)
    backstop.daemon = True
    backstop.start()
    signal.alarm(limit)
    print(f"{scenario}: {' '.join(exes)}", flush=True)
    try:
        scenarios[scenario](ctx)
    except Fail as e:
        signal.alarm(0)
        print(f"FAIL {scenario} ({time.monotonic() - t0:.2f} s): {e}", flush=True)
        return 1
    finally:
        signal.alarm(0)
        backstop.cancel()
        ctx.cleanup()
    print(f"PASS {scenario} ({time.monotonic() - t0:.2f} s)", flush=True)
    return 0
