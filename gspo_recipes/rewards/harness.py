"""The program that runs inside the sandbox, around the model's code.

It is sent as the source of `python -I -c` and never imported inside the sandbox, so it uses only the standard
library. The job (program, tests, limits, nonce) arrives as JSON on the file descriptor named by `sys.argv[1]`,
which is closed before any model code runs; fd 0 is left untouched for the program's own input.

Modes:
  io       run the program as `__main__`; the caller compares its stdout. Exit status: the program's own.
  asserts  run the program, then each test statement on its own with a per-test alarm.
  script   run the program, then one test script (HumanEval's `check(...)`).

In the test modes the harness exits with `nonce + number of tests passed`. The nonce is random per run and lies
outside the codes that crashes, signals and `os._exit(0)` produce, so a program that exits early, or exits from an
atexit hook, cannot pass by accident. Tests run in a namespace of their own whose builtins are a copy taken before
the program ran, so redefining `check`, a test helper or a builtin changes nothing the tests see.
"""


def _run_harness():
    # Everything the harness needs after the model code starts is bound here, as locals: rebinding `os._exit`,
    # `sys.exit` or a module global from the program has no effect on them.
    import builtins
    import json
    import os
    import resource
    import signal
    import sys

    exit_now = os._exit
    set_timer = signal.setitimer
    real_timer = signal.ITIMER_REAL
    base_exception = BaseException

    with open(int(sys.argv[1]), "rb") as job_file:
        job = json.loads(job_file.read())

    for name, (soft, hard) in job["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))

    mode = job["mode"]
    try:
        program = compile(job["program"], "solution.py", "exec")
    except base_exception:
        exit_now(1)

    if mode == "io":
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        code = 0
        try:
            exec(program, namespace)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except base_exception:
            code = 1
        try:
            sys.stdout.flush()
        except base_exception:
            code = code or 1
        # os._exit: threads the program left running must not keep the process alive, and atexit hooks must not run.
        exit_now(code & 0xFF)

    nonce = job["nonce"]
    per_test_s = job["per_test_s"]
    tests = [compile(source, f"test_{i}.py", "exec") for i, source in enumerate(job["tests"])]
    setup = compile(job.get("setup") or "", "setup.py", "exec")
    clean_builtins = dict(builtins.__dict__)

    class TestTimeout(base_exception):
        pass

    def on_alarm(signum, frame):
        raise TestTimeout()

    signal.signal(signal.SIGALRM, on_alarm)

    def run(code, namespace):
        try:
            try:
                set_timer(real_timer, per_test_s)
                exec(code, namespace)
                return True
            finally:
                set_timer(real_timer, 0)
        except base_exception:
            return False

    solution = {"__name__": "solution", "__builtins__": builtins}
    passed = 0
    if run(program, solution):
        test_namespace = {key: value for key, value in solution.items() if key != "__builtins__"}
        test_namespace.update({"__name__": "tests", "__builtins__": clean_builtins})
        if run(setup, test_namespace):
            for test in tests:
                passed += run(test, test_namespace)
    exit_now(nonce + passed)


if __name__ == "__main__":
    _run_harness()
