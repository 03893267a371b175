#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Runs rdma-core's own test suite (the tests/ directory of the installed
# rdma-core release, which python3-pyverbs ships in
# /usr/share/doc/rdma-core/tests) against one RDMA device, and compares
# the outcomes on two devices.  Used by tests/lab/run-pyverbs in a lab guest.
#
#   pyverbs-suite.py prepare SRC DEST
#       copies the suite from SRC to DEST, decompressing the files
#       dh_compress gzipped (base.py.gz, ...).
#   pyverbs-suite.py run SUITE DEV RESULTS [--timeout SECS] [ID...]
#       runs every test of SUITE (as run_tests.py --dev DEV -v would) with
#       unittest's verbose output on stdout, and writes one line per test
#       to RESULTS: "<status> <test id>", status one of ok, fail, error,
#       skip, xfail, xpass, crash, timeout.  Each test may take SECS (default
#       180); a test that takes longer is interrupted (SIGALRM) and, if that
#       does not end it, its process is killed.  A test that kills its
#       process (a crash in the provider, say) counts as "crash" and the
#       suite goes on from the next test in a fresh process.  With IDs
#       (test ids or their prefixes, e.g. tests.test_qpex), only those.
#   pyverbs-suite.py compare REF_RESULTS REF_NAME DUT_RESULTS DUT_NAME LABEL [GAPS]
#       prints each test that passes on REF but not on DUT, each test that
#       fails, errors, crashes or times out on DUT, the tally of both, and
#       "LABEL: N passed, N failed, N known gaps", where "failed" counts the
#       tests of those two kinds (each once) and "passed" the tests that
#       pass on DUT.  GAPS (tests/lab/pyverbs-gaps.txt) lists tests of
#       features DUT does not offer yet: one that passes on REF and is
#       skipped on DUT is a known gap, not failed; one that passes on DUT
#       is stale and counts as failed.
import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest
from importlib.machinery import SourceFileLoader

STATUSES = ('ok', 'fail', 'error', 'skip', 'xfail', 'xpass', 'crash',
            'timeout')


def prepare(src, dest):
    if not os.path.exists(os.path.join(src, 'run_tests.py')):
        sys.exit(f'pyverbs-suite: no run_tests.py in {src} '
                 '(install python3-pyverbs: tools/install-deps)')
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    n = 0
    for fn in sorted(os.listdir(src)):
        path = os.path.join(src, fn)
        if fn.endswith('.gz'):
            with gzip.open(path, 'rb') as f, \
                    open(os.path.join(dest, fn[:-3]), 'wb') as out:
                shutil.copyfileobj(f, out)
        elif os.path.isfile(path):
            shutil.copy(path, dest)
        else:
            continue
        n += 1
    print(f'pyverbs-suite: {n} files of {src} in {dest}')


class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout('the test ran past its time limit (SIGALRM)')


def load(suite_dir, dev):
    """The suite's tests, in run_tests.py's order, with --dev DEV."""
    sys.path.insert(0, suite_dir)
    from args_parser import parser
    sys.argv[1:] = ['--dev', dev, '-v']
    parser.parse_args()
    tests = SourceFileLoader(
        'tests', os.path.join(suite_dir, '__init__.py')).load_module()
    flat = []

    def walk(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            else:
                flat.append(t)
    walk(unittest.defaultTestLoader.loadTestsFromModule(tests))
    return flat


class Recorder(unittest.TextTestResult):
    """Verbose text output plus one progress line per test in a file."""
    log = None
    limit = 180

    def _rec(self, line):
        self.log.write(line + '\n')
        self.log.flush()

    def startTest(self, test):
        self._status = None
        self._rec('start ' + test.id())
        signal.alarm(self.limit)
        super().startTest(test)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)
        self._rec(f'{self._status or "ok"} {test.id()}')

    def _set(self, status):
        # the worst outcome of a test wins (a failing tearDown after a skip)
        order = ('ok', 'skip', 'xfail', 'xpass', 'fail', 'error', 'timeout')
        if self._status is None or order.index(status) > \
                order.index(self._status):
            self._status = status

    def addError(self, test, err):
        self._set('timeout' if err[0] is TestTimeout else 'error')
        super().addError(test, err)

    def addFailure(self, test, err):
        self._set('fail')
        super().addFailure(test, err)

    def addSkip(self, test, reason):
        self._set('skip')
        super().addSkip(test, reason)

    def addExpectedFailure(self, test, err):
        self._set('xfail')
        super().addExpectedFailure(test, err)

    def addUnexpectedSuccess(self, test):
        self._set('xpass')
        super().addUnexpectedSuccess(test)

    def addSubTest(self, test, subtest, outcome):
        if outcome is not None:
            self._set('fail' if issubclass(outcome[0], test.failureException)
                      else 'error')
        super().addSubTest(test, subtest, outcome)


def child(suite_dir, dev, ids_file, progress, limit):
    """Runs the tests named in IDS_FILE, in the suite's order."""
    want = set(open(ids_file).read().split())
    tests = [t for t in load(suite_dir, dev) if t.id() in want]
    signal.signal(signal.SIGALRM, _alarm)
    Recorder.log = open(progress, 'a')
    Recorder.limit = limit
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2,
                                     resultclass=Recorder)
    runner.run(unittest.TestSuite(tests))
    sys.stdout.flush()
    # Skip interpreter teardown: objects the suite leaked are released by
    # the kernel when the process exits, as for any crashed application.
    os._exit(0)


def read_progress(path):
    done, running = {}, None
    if os.path.exists(path):
        for line in open(path):
            st, _, tid = line.strip().partition(' ')
            if st == 'start':
                running = tid
            elif st in STATUSES:
                done[tid] = st
                running = None
    return done, running


def run(suite_dir, dev, results, limit, only):
    ids = [t.id() for t in load(suite_dir, dev)
           if not only or any(t.id() == o or t.id().startswith(o + '.')
                              for o in only)]
    work = results + '.d'
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    progress = os.path.join(work, 'progress')
    final = {}
    start = time.time()
    attempt = 0
    while True:
        left = [i for i in ids if i not in final]
        if not left:
            break
        attempt += 1
        ids_file = os.path.join(work, f'ids.{attempt}')
        with open(ids_file, 'w') as f:
            f.write('\n'.join(left) + '\n')
        open(progress, 'w').close()
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                              'child', suite_dir, dev, ids_file, progress,
                              str(limit)])
        seen, since = None, time.time()
        killed = False
        while p.poll() is None:
            time.sleep(1)
            _, running = read_progress(progress)
            if running != seen:
                seen, since = running, time.time()
            elif running and time.time() - since > limit + 30:
                print(f'pyverbs-suite: {running} still running after '
                      f'{limit + 30} s: killing the test process',
                      flush=True)
                p.kill()
                p.wait()
                killed = True
        done, running = read_progress(progress)
        final.update(done)
        if running:
            final[running] = 'timeout' if killed else 'crash'
            print(f'pyverbs-suite: {running}: the test process '
                  f'{"was killed" if killed else "died"} '
                  f'(exit status {p.returncode}); going on in a new one',
                  flush=True)
        elif p.returncode != 0 or not done:
            # died outside any test (while loading, say): count the rest
            for i in left:
                final.setdefault(i, 'crash')
            print(f'pyverbs-suite: the test process exited with status '
                  f'{p.returncode} outside any test', flush=True)
    with open(results, 'w') as f:
        for i in ids:
            f.write(f'{final[i]} {i}\n')
    tally = {s: sum(1 for v in final.values() if v == s) for s in STATUSES}
    print(f'pyverbs-suite: {dev}: {len(ids)} tests in '
          f'{time.time() - start:.0f} s: ' +
          ', '.join(f'{v} {k}' for k, v in tally.items() if v))


def read_results(path):
    res = {}
    for line in open(path):
        st, _, tid = line.strip().partition(' ')
        if tid:
            res[tid] = st
    return res


def read_gaps(path):
    gaps = {}
    if path:
        for line in open(path):
            tid, _, why = line.partition('#')
            if tid.strip():
                gaps[tid.strip()] = why.strip()
    return gaps


def compare(ref_path, ref, dut_path, dut, label, gaps_path=None):
    r, d = read_results(ref_path), read_results(dut_path)
    gaps = read_gaps(gaps_path)
    for name, res in ((ref, r), (dut, d)):
        print(f'{name}: {len(res)} tests: ' +
              ', '.join(f'{sum(1 for v in res.values() if v == s)} {s}'
                        for s in STATUSES
                        if any(v == s for v in res.values())))
    bad, known = [], []
    print(f'== tests that pass on {ref} but not on {dut}')
    for tid, st in r.items():
        if st == 'ok' and d.get(tid) != 'ok':
            if tid in gaps and d.get(tid) == 'skip':
                known.append(tid)
                continue
            print(f'  {tid}: {ref} ok, {dut} {d.get(tid, "not run")}')
            bad.append(tid)
    print(f'== known gaps: pass on {ref}, skipped on {dut} (not counted)')
    for tid in known:
        print(f'  {tid}: {gaps[tid]}')
    print(f'== known gaps that pass on {dut} (stale: remove them)')
    for tid in gaps:
        if d.get(tid) == 'ok':
            print(f'  {tid}')
            bad.append(tid)
    print(f'== tests that fail on {dut} (fail, error, crash, timeout)')
    for tid, st in d.items():
        if st in ('fail', 'error', 'crash', 'timeout', 'xpass'):
            print(f'  {tid}: {dut} {st}, {ref} {r.get(tid, "not run")}')
            if tid not in bad:
                bad.append(tid)
    print(f'== tests that pass on {dut} but not on {ref}')
    for tid, st in d.items():
        if st == 'ok' and r.get(tid) != 'ok':
            print(f'  {tid}: {dut} ok, {ref} {r.get(tid, "not run")}')
    passed = sum(1 for v in d.values() if v == 'ok')
    print(f'{label}: {passed} passed, {len(bad)} failed, '
          f'{len(known)} known gaps')


def main():
    a = sys.argv[1:]
    if a[:1] == ['prepare'] and len(a) == 3:
        prepare(a[1], a[2])
    elif a[:1] == ['run'] and len(a) >= 4:
        limit, only = 180, a[4:]
        if only[:1] == ['--timeout'] and len(only) >= 2:
            limit, only = int(only[1]), only[2:]
        run(os.path.abspath(a[1]), a[2], os.path.abspath(a[3]), limit, only)
    elif a[:1] == ['child'] and len(a) == 6:
        child(a[1], a[2], a[3], a[4], int(a[5]))
    elif a[:1] == ['compare'] and len(a) in (6, 7):
        compare(*a[1:])
    else:
        sys.exit('usage: pyverbs-suite.py prepare SRC DEST | '
                 'run SUITE DEV RESULTS [--timeout SECS] | '
                 'compare REF_RESULTS REF_NAME DUT_RESULTS DUT_NAME LABEL [GAPS]')


if __name__ == '__main__':
    main()
