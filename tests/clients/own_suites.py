"""Run client libraries' own integration suites against a broker URL (issue 13 item 7).

The suites are not in this repository: they are fetched into a temporary directory (pip
download for sdists that ship their tests, a git checkout of the release tag for the others),
run with their own pytest / go test in a private virtualenv, and each run leaves a JUnit XML
file. `compare` turns two runs (Leveret, RabbitMQ) into the test-by-test table of
docs/clients.md.

    python tests/clients/own_suites.py run --url amqp://guest:guest@127.0.0.1:5672/ \\
        --label leveret --out /tmp/suites [--suites pika,amqp,kombu,aiormq,aio-pika,go] \\
        [--src pika=DIR --src aiormq=DIR --src aio-pika=DIR]
    python tests/clients/own_suites.py compare /tmp/suites leveret rabbitmq

Sources: amqp 5.4.2 and kombu 5.7.0 from their PyPI sdists (t/integration); pika 1.4.4,
aiormq 6.9.2 and aio-pika 9.6.0 from their GitHub release tags (their sdists ship no tests):
`git clone --depth 1 --branch TAG` unless --src names a checkout; amqp091-go from Debian's
golang-github-rabbitmq-amqp091-go-dev (/usr/share/gocode, `go test -tags integration`).
amqplib's npm package ships no tests and is not run here.

What each suite is told: pika's acceptance tests hard-code port 5672, so the copy is edited to
the URL's port; py-amqp and kombu read RABBITMQ_HOST / RABBITMQ_5672_TCP; aiormq and amqp091-go
read AMQP_URL; aio-pika 9.6.0's conftest only starts RabbitMQ in Docker, so two fixtures are
appended to the copy's conftest that give AMQP_URL's broker instead. TLS tests fail on both
brokers (no TLS listener with the suites' certificates is set up).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

VERSIONS = {"pika": "1.4.4", "amqp": "5.4.2", "kombu": "5.7.0", "aiormq": "6.9.2",
            "aio-pika": "9.6.0"}
GIT = {"pika": ("https://github.com/pika/pika", "1.4.4"),
       "aiormq": ("https://github.com/mosquito/aiormq", "6.9.2"),
       "aio-pika": ("https://github.com/mosquito/aio-pika", "9.6.0")}
# test paths inside each source tree
PATHS = {"pika": ["tests/acceptance/blocking_adapter_test.py",
                  "tests/acceptance/async_adapter_tests.py"],
         "amqp": ["t/integration/test_rmq.py", "t/integration/test_integration.py"],
         "kombu": ["t/integration/test_py_amqp.py"],
         "aiormq": ["tests"],
         "aio-pika": ["tests"]}
VENV_PACKAGES = ["pytest==9.2.0", "pytest-timeout==2.4.0", "pika==1.4.4", "amqp==5.4.2",
                 "kombu==5.7.0", "aiormq==6.9.2", "aio-pika==9.6.0", "aiomisc-pytest==2.0.0",
                 "case", "pytest-sugar", "gevent", "tornado", "twisted", "shortuuid",
                 "timeout-decorator"]
GO_SRC = Path("/usr/share/gocode/src/github.com/rabbitmq/amqp091-go")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_venv(path: Path) -> Path:
    py = path / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *VENV_PACKAGES], check=True)
    return py


def source(name: str, work: Path, given: dict[str, str]) -> Path:
    dest = work / f"{name}-src"
    if dest.exists():
        return dest
    if name in given:
        shutil.copytree(given[name], dest, ignore=shutil.ignore_patterns(".git"))
    elif name in GIT:
        url, tag = GIT[name]
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", tag, url, str(dest)],
                       check=True)
    else:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", f"{name}=={VERSIONS[name]}", "-d", str(work)],
                       check=True)
        sdist = next(work.glob(f"{name}-{VERSIONS[name]}.tar.gz"))
        shutil.unpack_archive(str(sdist), str(work))
        (work / f"{name}-{VERSIONS[name]}").rename(dest)
    return dest


def run_python_suite(name: str, src: Path, py: Path, url: str, junit: Path,
                     timeout: int) -> int:
    u = urllib.parse.urlsplit(url)
    env = dict(os.environ, AMQP_URL=url, RABBITMQ_HOST=u.hostname or "127.0.0.1",
               RABBITMQ_5672_TCP=str(u.port or 5672), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    if name == "pika":
        # the acceptance tests connect to port 5672 whatever they are told
        for f in (src / "tests").rglob("*.py"):
            text = f.read_text()
            if "5672" in text:
                f.write_text(re.sub(r"\b5672\b", str(u.port or 5672), text))
    if name == "aio-pika":
        # its conftest starts a RabbitMQ in Docker; point its URL fixture at ours instead
        with open(src / "tests" / "conftest.py", "a") as f:
            f.write(AIO_PIKA_CONFTEST)
    cmd = [str(py), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
           f"--timeout={timeout}", "-o", "timeout_method=signal", f"--junitxml={junit}",
           *PATHS[name]]
    log(f"{name}: {' '.join(cmd)} (in {src})")
    return subprocess.run(cmd, cwd=src, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode


AIO_PIKA_CONFTEST = """

# --- added by leveret's tests/clients/own_suites.py: the broker under test, not Docker ---
def pytest_configure(config):  # noqa: F811
    return None


@pytest.fixture(scope="session")
def amqp_direct_url():  # noqa: F811
    import os as _os
    import urllib.parse as _up
    _u = _up.urlsplit(_os.environ["AMQP_URL"])
    return URL.build(scheme="amqp", user=_u.username or "guest",
                     password=_u.password or "guest", path="//", host=_u.hostname,
                     port=_u.port or 5672)
"""


def run_go_suite(work: Path, url: str, junit: Path, timeout: int) -> int:
    """go test -tags integration in GOPATH mode on Debian's source; the -v output becomes a
    JUnit file."""
    gopath = work / "gopath"
    dest = gopath / "src" / "github.com" / "rabbitmq" / "amqp091-go"
    if not dest.exists():
        shutil.copytree(GO_SRC, dest)
    env = dict(os.environ, AMQP_URL=url, GO111MODULE="off",
               GOPATH=f"{gopath}:/usr/share/gocode", GOCACHE=str(work / "gocache"))
    cmd = ["go", "test", "-tags", "integration", "-count=1", "-v", "-timeout",
           f"{timeout * 20}s", "-run", "Integration", "."]
    log(f"amqp091-go: {' '.join(cmd)} (in {dest})")
    res = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True)
    (junit.with_suffix(".log")).write_text(res.stdout + res.stderr)
    suite = ET.Element("testsuite", name="amqp091-go")
    for m in re.finditer(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)", res.stdout, re.M):
        case = ET.SubElement(suite, "testcase", classname="amqp091-go", name=m.group(2),
                             time=m.group(3))
        if m.group(1) == "FAIL":
            ET.SubElement(case, "failure", message="see the .log file")
        elif m.group(1) == "SKIP":
            ET.SubElement(case, "skipped")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(junit)
    return res.returncode


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """{test id: (outcome, message)} from a JUnit XML file."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                msg = (el.get("message") or el.text or "").strip().splitlines()[0:1]
                msg = msg[0][:200] if msg else ""
                break
        out[tid] = (outcome, msg)
    return out


def compare(out: Path, a: str, b: str) -> str:
    lines = []
    for junit_a in sorted(out.glob(f"*-{a}.xml")):
        suite = junit_a.name[:-len(f"-{a}.xml")]
        junit_b = out / f"{suite}-{b}.xml"
        ra = outcomes(junit_a)
        rb = outcomes(junit_b) if junit_b.exists() else {}
        def tally(r):
            c = {}
            for o, _ in r.values():
                c[o] = c.get(o, 0) + 1
            return ", ".join(f"{n} {o}" for o, n in sorted(c.items())) or "not run"
        lines.append(f"<details><summary>{suite}: {a} {tally(ra)}; {b} {tally(rb)}"
                     "</summary>\n")
        lines.append(f"| test | {a} | {b} |\n| --- | --- | --- |")
        for tid in sorted(set(ra) | set(rb)):
            oa, ma = ra.get(tid, ("not run", ""))
            ob, mb = rb.get(tid, ("not run", ""))
            cell_a = oa + (f": {ma}" if oa in ("failed", "error") and ma else "")
            cell_b = ob + (f": {mb}" if ob in ("failed", "error") and mb else "")
            lines.append(f"| {tid} | {cell_a.replace('|', '/')} | {cell_b.replace('|', '/')} |")
        lines.append("\n</details>\n")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="own_suites.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--url", required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--work", help="where sources and the virtualenv go (default: a temp dir)")
    r.add_argument("--suites", default="pika,amqp,kombu,aiormq,aio-pika,go")
    r.add_argument("--src", action="append", default=[], metavar="NAME=DIR")
    r.add_argument("--timeout", type=int, default=60, help="seconds per test")
    c = sub.add_parser("compare")
    c.add_argument("out")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        print(compare(Path(args.out), args.a, args.b))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="leveret-suites-"))
    work.mkdir(parents=True, exist_ok=True)
    given = dict(s.split("=", 1) for s in args.src)
    py = ensure_venv(work / "venv")
    for name in args.suites.split(","):
        junit = out / f"{name}-{args.label}.xml"
        if name == "go":
            if not (shutil.which("go") and GO_SRC.exists()):
                log("amqp091-go: skipped (apt-get install golang-go "
                    "golang-github-rabbitmq-amqp091-go-dev)")
                continue
            rc = run_go_suite(work, args.url, junit, args.timeout)
        else:
            # a fresh copy per run: pika's is edited for the port
            src = source(name, work, given)
            run_dir = work / f"{name}-{args.label}"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            shutil.copytree(src, run_dir)
            rc = run_python_suite(name, run_dir, py, args.url, junit, args.timeout)
        res = outcomes(junit) if junit.exists() else {}
        counts = {}
        for o, _ in res.values():
            counts[o] = counts.get(o, 0) + 1
        log(f"{name} [{args.label}]: exit {rc}, {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
