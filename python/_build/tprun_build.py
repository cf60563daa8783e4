"""The PEP 517 build backend of the tprun Python package (standard library only).

    pip install ./python                   # in a clone of the repository
    pip install "git+https://github.com/tprun/tprun#subdirectory=python"

build_wheel builds libtprun.so from the Go module one level above this
project, with `go build -buildmode=c-shared -trimpath ./cmd/libtprun` run in
the repository root, and packs it with the package's files into a platform
wheel, py3-none-<platform>: the package loads the library with ctypes, so
any Python 3 of that platform can use it. pip builds a git URL's
#subdirectory from a clone of the whole repository, and a local folder in
place (pip 21.3 and later), so the Go module is where this backend looks in
both cases. Nothing is written into the source tree.

- TPRUN_PREBUILT_LIB=FILE packs that libtprun.so instead of building one,
  for a machine without Go: build the library where Go is, copy it.
- The config setting go=PATH names the go command (default: go on PATH,
  else $GOROOT/bin/go, else /usr/local/go/bin/go):
  `pip install -C go=$HOME/sdk/go1.26.8/bin/go ./python`.

Before packing, the package itself loads the library in a child Python: a
library it cannot use (another C interface version, another platform) fails
the build, and the library's version line (tprun_version) gives the wheel's
version, so the package has no version of its own to keep in step.

There is no sdist: the package is made from the Go module outside this
folder, so build_sdist refuses and says how to build instead.
"""

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile

NAME = "tprun"
SUMMARY = "tprun's fused tensor-parallel up-projection inside a Python rank process (ctypes over libtprun.so)"
HOME_PAGE = "https://github.com/tprun/tprun"
REQUIRES_PYTHON = ">=3.8"
MODULE = "github.com/tprun/tprun"
PREBUILT_ENV = "TPRUN_PREBUILT_LIB"
LIBRARY = "libtprun.so"
BUILD_COMMAND = "go build -buildmode=c-shared -o libtprun.so ./cmd/libtprun"

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(PROJECT)  # the repository: the Go module
PACKAGE = os.path.join(PROJECT, NAME)

# Files of the package folder that are build outputs, not sources: the
# library and cgo's header, which the manual build writes there.
_NOT_PACKED = {LIBRARY, "libtprun.h"}


class BuildError(Exception):
    """The wheel cannot be built; the message says what is missing."""


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Builds (or takes) libtprun.so, checks that the package loads it, and
    writes the wheel into wheel_directory; returns the wheel's file name."""
    with tempfile.TemporaryDirectory(prefix="tprun-build-") as tmp:
        lib = _library(tmp, config_settings or {})
        version = wheel_version(_version_line(lib))
        return _write_wheel(wheel_directory, version, lib)


def build_sdist(sdist_directory, config_settings=None):
    raise BuildError(
        "tprun has no source distribution: libtprun.so is built from the Go module at the root of the "
        "repository, outside this folder. Install from a clone (pip install ./python) or from git "
        f"(pip install 'git+{HOME_PAGE}#subdirectory=python'), or build a wheel where Go is "
        "(pip wheel --no-deps -w DIR ./python) and install that wheel elsewhere")


# The library.


def _library(tmp, settings):
    """The path of the libtprun.so to pack: TPRUN_PREBUILT_LIB's, or one
    built into tmp."""
    # PREBUILT_ENV, spelled out where it is read: docs/cli.md must name it.
    prebuilt = os.environ.get("TPRUN_PREBUILT_LIB")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise BuildError(f"{PREBUILT_ENV}={prebuilt}: no such file; it names a libtprun.so built from the "
                             f"repository with: {BUILD_COMMAND}")
        return os.path.abspath(prebuilt)
    _check_repository()
    go = _go_command(settings)
    out = os.path.join(tmp, LIBRARY)
    args = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./cmd/libtprun"]
    # c-shared needs cgo, whatever the environment says.
    env = dict(os.environ, CGO_ENABLED="1")
    res = _run(args, env)
    if res.returncode != 0 and "-buildvcs=false" in res.stdout:
        # git is missing or refuses this clone (one owned by another user):
        # build without the revision, which only the version misses.
        print(f"tprun: building without version control information ({res.stdout.strip().splitlines()[0]}); "
              "the wheel's version is 0+devel", file=sys.stderr)
        args.insert(2, "-buildvcs=false")
        res = _run(args, env)
    if res.returncode != 0:
        raise BuildError(f"{' '.join(args)} (in {ROOT}) failed with exit status {res.returncode}:\n"
                         f"{res.stdout.rstrip()}{_build_hints(go, res.stdout)}")
    return out


def _run(args, env):
    try:
        return subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
    except OSError as e:
        raise BuildError(f"running {args[0]}: {e}; {_need_go()}") from e


def _check_repository():
    """Fails unless the tprun Go module is one level up."""
    try:
        with open(os.path.join(ROOT, "go.mod")) as f:
            gomod = f.read()
    except OSError:
        gomod = ""
    if re.search(r"^module\s+" + re.escape(MODULE) + r"\s*$", gomod, re.M) and \
            os.path.isdir(os.path.join(ROOT, "cmd", "libtprun")):
        return
    raise BuildError(
        f"the tprun Go module ({MODULE}) is not at {ROOT}, the folder above {PROJECT}: libtprun.so is "
        "built from a clone of the whole repository (pip install ./python in it, or "
        f"pip install 'git+{HOME_PAGE}#subdirectory=python'); pip before 21.3 copies the project folder "
        f"alone, so upgrade pip. Or set {PREBUILT_ENV} to a libtprun.so built where the repository is")


def go_minimum():
    """The Go version go.mod requires ("1.26.8"), or None."""
    try:
        with open(os.path.join(ROOT, "go.mod")) as f:
            m = re.search(r"^go\s+(\S+)\s*$", f.read(), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


def _need_go():
    return (f"Go {go_minimum() or '(the version go.mod names)'} or later is needed to build libtprun.so: "
            f"https://go.dev/dl; or set {PREBUILT_ENV} to a libtprun.so built where Go is, with: {BUILD_COMMAND}")


def _go_command(settings):
    go = settings.get("go")
    if go:
        if not (os.path.isfile(go) and os.access(go, os.X_OK)):
            raise BuildError(f"config setting go={go} is not an executable file; {_need_go()}")
        return go
    found = shutil.which("go")
    if found:
        return found
    candidates = [os.path.join(os.environ["GOROOT"], "bin", "go")] if os.environ.get("GOROOT") else []
    for c in candidates + ["/usr/local/go/bin/go"]:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise BuildError(f"no go command on PATH; {_need_go()}")


def _build_hints(go, output):
    """What a failed build's output suggests is missing."""
    hints = []
    want = go_minimum()
    try:
        have = subprocess.run([go, "env", "GOVERSION"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True).stdout.strip()
    except OSError:
        have = ""
    if want and re.fullmatch(r"go\d+(\.\d+)*\S*", have) and _version_tuple(have) < _version_tuple(want):
        hints.append(f"this go command is {have}: {_need_go()}")
    if "cgo" in output or "C compiler" in output:
        hints.append("libtprun.so is built with cgo, which needs a C compiler (gcc or clang; CC names another)")
    return "".join("\n" + h for h in hints)


def _version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def _version_line(lib):
    """Loads lib through the package, in a child Python (a Go runtime is
    not started in this process), and returns tprun.version()."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import tprun; print(tprun.version())"
    env = dict(os.environ, TPRUN_LIB=lib)
    res = subprocess.run([sys.executable, "-I", "-B", "-c", code, PROJECT], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True)
    if res.returncode != 0:
        raise BuildError(f"the package cannot use {lib}: {_last_line(res.stdout)}\n{res.stdout.rstrip()}")
    return _last_line(res.stdout)


# The version.

# A version in PEP 440's normalized form.
_PEP440 = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?")


def wheel_version(line):
    """The wheel's version from the library's version line ("tprun VERSION,
    C interface version N, ...")."""
    m = re.match(r"tprun (\S+?),", line)
    if not m:
        raise BuildError(f"the library's version line is not understood: {line!r}")
    return pep440(m.group(1))


def pep440(go_version):
    """The PEP 440 form of a Go module version, as Go stamps it into a
    build: a release tag (v1.2.3 -> 1.2.3, v1.2.3-rc.1 -> 1.2.3rc1), a
    pseudo-version for a commit after the last tag (a development release
    of the next version, with the commit as the local label:
    v1.2.4-0.20250102030405-0123456789ab -> 1.2.4.dev20250102030405+g0123456789ab;
    v1.2.3-rc.1.0.20250102030405-0123456789ab -> 1.2.3rc1.post0.dev20250102030405+g0123456789ab),
    +dirty for uncommitted changes (-> local label dirty), or (devel) for a
    build without version control information (-> 0+devel)."""
    if go_version in ("", "(devel)"):
        return "0+devel"
    m = re.fullmatch(r"v(\d+\.\d+\.\d+)(?:-([0-9A-Za-z.-]+?))?(?:\+([0-9A-Za-z.-]+))?", go_version)
    if not m:
        raise BuildError(f"the library's module version {go_version!r} is not a Go module version")
    release, pre, build = m.groups()
    version, local = release, []
    if pre:
        # The three forms of a pseudo-version: no tag before (vX.0.0-T-R),
        # a release before (vX.Y.Z+1-0.T-R), a pre-release before
        # (vX.Y.Z-PRE.0.T-R). Each is a development release.
        pseudo = re.fullmatch(r"(?:(.+)\.0\.|0\.)?(\d{14})-([0-9a-f]{12})", pre)
        if pseudo:
            base, stamp, rev = pseudo.groups()
            suffix, words = _pre_release(base) if base else ("", [])
            # After the pre-release it follows: a development release of
            # its post-release.
            version += (suffix + ".post0" if suffix else "") + ".dev" + stamp
            local += words + ["g" + rev]
        else:
            suffix, words = _pre_release(pre)
            # A label PEP 440 has no word for: a development release
            # (before the release, as in semver) named in the local label.
            version += suffix or ".dev0"
            local += words
    if build:
        local += [p for p in re.split(r"[^0-9A-Za-z]+", build) if p]
    if local:
        version += "+" + ".".join(local).lower()
    if not _PEP440.fullmatch(version):
        raise BuildError(f"the library's module version {go_version!r} gives {version!r}, not a PEP 440 version")
    return version


def _pre_release(pre):
    """A semver pre-release label in PEP 440's words: (suffix, []) for one
    it has a word for (alpha.1 -> a1, rc.2 -> rc2), else ("", the label's
    words for the local label)."""
    m = re.fullmatch(r"(alpha|a|beta|b|rc|c|pre|preview)[.-]?(\d*)", pre, re.I)
    if not m:
        return "", [w for w in re.split(r"[^0-9A-Za-z]+", pre) if w]
    word = m.group(1).lower()
    label = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}.get(word, word)
    return f"{label}{int(m.group(2) or 0)}", []


# The wheel.


def platform_tag():
    """This Python's platform as a wheel tag (linux_x86_64)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def _package_files():
    """(name in the wheel, path) of every source file of the package."""
    files = []
    for top, dirs, names in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for n in sorted(names):
            if n.startswith(".") or n in _NOT_PACKED or n.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(top, n)
            files.append((os.path.relpath(path, PROJECT).replace(os.sep, "/"), path))
    return files


def _metadata(version):
    try:
        with open(os.path.join(PACKAGE, "README.md"), encoding="utf-8") as f:
            readme = f.read()
    except OSError:
        readme = ""
    head = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        f"Home-page: {HOME_PAGE}",
        f"Project-URL: Source, {HOME_PAGE}",
        f"Requires-Python: {REQUIRES_PYTHON}",
        "Description-Content-Type: text/markdown",
    ]
    return ("\n".join(head) + "\n\n" + readme).encode("utf-8")


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest


def _write_wheel(wheel_directory, version, lib):
    tag = "py3-none-" + platform_tag()
    dist_info = f"{NAME}-{version}.dist-info"
    name = f"{NAME}-{version}-{tag}.whl"
    entries = []  # (name, bytes, mode)
    for arc, path in _package_files():
        with open(path, "rb") as f:
            entries.append((arc, f.read(), 0o644))
    with open(lib, "rb") as f:
        entries.append((f"{NAME}/{LIBRARY}", f.read(), 0o755))
    wheel = ("Wheel-Version: 1.0\n"
             "Generator: tprun_build\n"
             "Root-Is-Purelib: false\n"
             f"Tag: {tag}\n").encode()
    entries += [
        (f"{dist_info}/METADATA", _metadata(version), 0o644),
        (f"{dist_info}/WHEEL", wheel, 0o644),
        (f"{dist_info}/top_level.txt", f"{NAME}\n".encode(), 0o644),
    ]
    record = "".join(f"{arc},{_record_hash(data)},{len(data)}\n" for arc, data, _ in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode(), 0o644))

    # The same sources give the same wheel: fixed dates, unless
    # SOURCE_DATE_EPOCH sets one.
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or 315532800)  # 1980-01-01, the zip format's first day
    date = time.gmtime(max(epoch, 315532800))[:6]
    os.makedirs(wheel_directory, exist_ok=True)
    final = os.path.join(wheel_directory, name)
    partial = f"{final}.{os.getpid()}.part"
    try:
        with open(partial, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, data, mode in entries:
                info = zipfile.ZipInfo(arc, date)
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
        os.replace(partial, final)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    return name
