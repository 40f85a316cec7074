#!/usr/bin/env python3
"""Summarize a `meson test` run: one line per failed/skipped case, then
`N passed, N failed, N skipped` as the very last line.

Usage: python3 tests/summarize.py [BUILDDIR...]       (default: build; several
           build directories are counted together, cases of all but the first
           named with their directory in front)
       python3 tests/summarize.py --clean [BUILDDIR]  (before `meson test`:
           remove the GoogleTest XML files earlier runs left, and the logs)

What is counted (python3 standard library only):

* Every meson test that is *not* registered with `protocol: 'gtest'` counts as
  one: OK / EXPECTEDFAIL -> passed, SKIP (exit status 77) -> skipped,
  anything else (FAIL, TIMEOUT, ERROR, INTERRUPT, UNEXPECTEDPASS) -> failed.
* Every GoogleTest test case of a `protocol: 'gtest'` test counts as one.
  meson runs such a binary with `--gtest_output=xml:<test name>.xml` (in the
  test's workdir, else the build dir) and merges that XML into
  meson-logs/testlog.junit.xml as <testsuite name="<project>.<meson test
  name>.<GoogleTest suite>">; meson drops GoogleTest's `result` attribute
  there, so a case is failed if it has <failure>/<error>, skipped if it has
  <skipped> (GTEST_SKIP) or status="notrun" (DISABLED_), else passed.
  If the merged report lacks the binary, its own XML file is read instead.
* A gtest binary that crashed or timed out writes no XML (or meson could pick
  up a stale one from an earlier run: such files are ignored by mtime). Its
  cases are then recovered from the console output in testlog.json
  ([ RUN ] / [ OK ] / [ FAILED ] / [ SKIPPED ]), the case that was running
  counts as failed, and whenever meson says the binary failed but no case
  failed, the binary itself counts as one failure: never silently zero.

Exit status: 1 if anything failed or if no test ran at all, else 0.
"""

import json
import os
import re
import signal
import sys
import xml.etree.ElementTree as ET

PASS_RESULTS = {"OK", "EXPECTEDFAIL"}
SKIP_RESULTS = {"SKIP"}
# Seconds of slack when deciding whether a gtest XML file was written by this
# run (file mtimes use a coarse clock); older files are leftovers of an
# earlier run that meson would have merged anyway.
STALE_SLACK_S = 0.5


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = []   # (name, reason)
        self.skipped = []  # (name, reason)

    def ok(self, n=1):
        self.passed += n

    def fail(self, name, reason=""):
        self.failed.append((name, reason))

    def skip(self, name, reason=""):
        self.skipped.append((name, reason))


def one_line(text, limit=160):
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_json_lines(path):
    tests = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                tests.append(json.loads(line))
            except ValueError as e:
                print(f"summarize: {path}:{lineno}: unreadable line ({e})")
    return tests


def load_intro(builddir):
    """name -> list of intro-tests.json entries (protocol, workdir, suite)."""
    path = os.path.join(builddir, "meson-info", "intro-tests.json")
    by_name = {}
    try:
        with open(path, encoding="utf-8") as f:
            for t in json.load(f):
                by_name.setdefault(t.get("name", ""), []).append(t)
    except (OSError, ValueError):
        pass
    return by_name


def pretty_names(t):
    """The names meson may print for an intro-tests.json entry (mirrors
    TestHarness.get_pretty_suite: 'proj:suite1+suite2 / name' or 'name')."""
    name = t.get("name", "")
    names = {name}
    suites = t.get("suite") or []
    if suites:
        def split(s):
            return s.split(":", 1) if ":" in s else (s, "")
        rv = split(suites[0])[0]
        s = "+".join(split(x)[1] for x in suites)
        names.add(rv + (":" + s if s else "") + " / " + name)
    return names


def find_intro(json_name, intro):
    """The intro-tests.json entry for a testlog.json name, or None."""
    candidates = []
    for name, entries in intro.items():
        if json_name == name or json_name.endswith(" / " + name):
            candidates.extend(entries)
    exact = [t for t in candidates if json_name in pretty_names(t)]
    pool = exact or candidates
    return pool[0] if pool else None


def gtest_cases_from_suites(suites):
    """[(case name, 'passed'|'failed'|'skipped', message)] from <testsuite>s."""
    cases = []
    for suite in suites:
        for case in suite.iter("testcase"):
            cname = case.get("name", "")
            cls = case.get("classname") or ""
            full = f"{cls}.{cname}" if cls else cname
            if case.get("value_param"):
                full += f" [GetParam() = {case.get('value_param')}]"
            if case.get("type_param"):
                full += f" [TypeParam = {case.get('type_param')}]"
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            skipped = case.find("skipped")
            if bad is not None:
                cases.append((full, "failed", bad.get("message") or bad.text or ""))
            elif skipped is not None or case.get("result") == "skipped":
                msg = ""
                if skipped is not None:
                    msg = skipped.get("message") or skipped.text or ""
                cases.append((full, "skipped", msg))
            elif case.get("status") == "notrun" or case.get("result") == "suppressed":
                cases.append((full, "skipped", "disabled"))
            else:
                cases.append((full, "passed", ""))
    return cases


def skip_reason(msg):
    """GoogleTest skip messages are 'file:line\\nuser text'."""
    lines = [l for l in (msg or "").splitlines() if l.strip()]
    if len(lines) >= 2 and re.match(r"^\S+:\d+$", lines[0].strip()):
        return one_line(" ".join(lines[1:]) + f" [{lines[0].strip()}]")
    return one_line(msg)


RUN_RE = re.compile(r"\[ RUN      \] (.+?)\s*$")
END_RE = re.compile(r"\[( {7}OK |  FAILED  |  SKIPPED )\] (.+?)(?:, where .*)? \(\d+ ms\)\s*$")


def gtest_cases_from_stdout(text):
    """Best effort for a binary that left no XML: finished cases from the
    console, plus the one that was running when it died (None if none)."""
    cases, running = [], None
    for line in (text or "").splitlines():
        m = RUN_RE.search(line)
        if m:
            running = m.group(1)
            continue
        m = END_RE.search(line)
        if m and running is not None and m.group(2) == running:
            tag = m.group(1).strip()
            cases.append((running, {"OK": "passed", "FAILED": "failed",
                                    "SKIPPED": "skipped"}[tag], ""))
            running = None
    return cases, running


def describe_result(t):
    res = t.get("result", "?")
    rc = t.get("returncode")
    if res == "TIMEOUT":
        return f"timed out after {t.get('duration', 0):.0f}s"
    if isinstance(rc, int) and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = "?"
        return f"{res}: killed by signal {-rc} ({sig})"
    if rc is not None:
        return f"{res}: exit status {rc}"
    return res


def clean(builddir):
    """Remove what an earlier `meson test` left that could be mistaken for
    this run's results: the logs and each gtest test's <name>.xml."""
    paths = [os.path.join(builddir, "meson-logs", "testlog.json"),
             os.path.join(builddir, "meson-logs", "testlog.junit.xml")]
    for entries in load_intro(builddir).values():
        for t in entries:
            if t.get("protocol") == "gtest" and t.get("name"):
                paths.append(os.path.join(t.get("workdir") or builddir,
                                          t["name"] + ".xml"))
    for p in paths:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            print(f"summarize: cannot remove {p}: {e}")
    return 0


def tally_builddir(builddir, tally, label):
    """Adds one build directory's `meson test` results to tally; names of
    cases get `label` in front (to tell sanitizer builds apart)."""
    logdir = os.path.join(builddir, "meson-logs")
    json_path = os.path.join(logdir, "testlog.json")
    junit_path = os.path.join(logdir, "testlog.junit.xml")

    tests = []
    if os.path.exists(json_path):
        tests = load_json_lines(json_path)
    else:
        print(f"summarize: {json_path} not found (did `meson test` run?)")
        tally.fail(label + builddir, "no test results (the build or `meson test` failed)")

    intro = load_intro(builddir)

    junit_suites = []
    if os.path.exists(junit_path):
        try:
            junit_suites = ET.parse(junit_path).getroot().findall(".//testsuite")
        except (ET.ParseError, OSError) as e:
            print(f"summarize: cannot read {junit_path}: {e}")

    gtest_tests = []
    for t in tests:
        entry = find_intro(t.get("name", ""), intro)
        if entry is not None:
            t["_gtest"] = entry.get("protocol") == "gtest"
            t["_entry"] = entry
        else:
            # No introspection data: gtest if meson merged a report for it.
            t["_gtest"] = (any(("." + t.get("name", "") + ".") in s.get("name", "")
                               for s in junit_suites)
                           or "[==========] Running " in (t.get("stdout") or ""))
            t["_entry"] = None
        if t["_gtest"]:
            gtest_tests.append(t["name"])

    # Merged suites are named '<project>.<meson test name>.<gtest suite>' and a
    # GoogleTest suite name has no '.', so strip the last component and match
    # the longest meson test name that ends the prefix.
    merged = {}
    by_len = sorted(set(gtest_tests), key=len, reverse=True)
    for s in junit_suites:
        sname = s.get("name", "")
        if "." not in sname:
            continue
        prefix = sname.rsplit(".", 1)[0]
        for name in by_len:
            if prefix == name or prefix.endswith("." + name):
                merged.setdefault(name, []).append(s)
                break

    for t in tests:
        name = label + t.get("name", "?")
        res = t.get("result", "?")
        if not t["_gtest"]:
            if res in PASS_RESULTS:
                tally.ok()
            elif res in SKIP_RESULTS:
                tally.skip(name, describe_result(t))
            else:
                tally.fail(name, describe_result(t))
            continue

        # Is the binary's own XML from this run?
        entry = t["_entry"] or {}
        xml_name = f"{entry.get('name', t.get('name', '?'))}.xml"
        xml_path = os.path.join(entry.get("workdir") or builddir, xml_name)
        fresh = True
        if os.path.exists(xml_path):
            start = t.get("starttime")
            if isinstance(start, (int, float)):
                fresh = os.path.getmtime(xml_path) >= start - STALE_SLACK_S

        cases, running = [], None
        if fresh and merged.get(t.get("name")):
            cases = gtest_cases_from_suites(merged[t.get("name")])
        elif fresh and os.path.exists(xml_path):
            try:
                cases = gtest_cases_from_suites(ET.parse(xml_path).getroot().iter("testsuite"))
            except (ET.ParseError, OSError):
                cases = []
        if not cases:
            cases, running = gtest_cases_from_stdout(t.get("stdout"))

        n_failed = 0
        for cname, status, msg in cases:
            full = f"{name}: {cname}"
            if status == "passed":
                tally.ok()
            elif status == "skipped":
                tally.skip(full, skip_reason(msg))
            else:
                n_failed += 1
                tally.fail(full, one_line(msg))
        if running is not None:
            n_failed += 1
            tally.fail(f"{name}: {running}", f"did not finish ({describe_result(t)})")

        if res in PASS_RESULTS:
            if not cases and running is None:
                tally.ok()  # passed, but left no per-case results
        elif res in SKIP_RESULTS:
            if not cases and running is None:
                tally.skip(name, describe_result(t))
        elif n_failed == 0:
            # Crash after the last case, at exit, before the first case, ...
            tally.fail(name, f"binary failed ({describe_result(t)})"
                       + ("" if cases else "; no per-case results"))



def main(argv):
    if len(argv) > 1 and argv[1] == "--clean":
        return clean(argv[2] if len(argv) > 2 else "build")
    builddirs = argv[1:] or ["build"]
    tally = Tally()
    for i, builddir in enumerate(builddirs):
        tally_builddir(builddir, tally, f"[{builddir}] " if i > 0 else "")

    if tally.failed:
        print(f"Failed ({len(tally.failed)}):")
        for n, why in tally.failed:
            print(f"  FAIL  {n}" + (f"  -- {why}" if why else ""))
    if tally.skipped:
        print(f"Skipped ({len(tally.skipped)}):")
        for n, why in tally.skipped:
            print(f"  SKIP  {n}" + (f"  -- {why}" if why else ""))

    nfail, nskip = len(tally.failed), len(tally.skipped)
    nothing = tally.passed == 0 and nfail == 0
    if nothing:
        print("summarize: no test ran at all")
    print(f"{tally.passed} passed, {nfail} failed, {nskip} skipped", flush=True)
    return 1 if (nfail > 0 or nothing) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
