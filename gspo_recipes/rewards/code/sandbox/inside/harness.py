"""The program that runs inside the sandbox, around the model's code.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/inside/harness.py.
"""


def _run_harness(job_fd=None, serve_fds=None):
    """Read the job from `job_fd` (default: the descriptor named by `sys.argv[1]`) and run its mode; serve mode talks
    on `serve_fds` (requests, replies; default: `sys.argv[2:4]`). The warm zygote passes both (`zygote.py`)."""
    # Everything the harness needs after the model code starts is bound here, as locals, and handed to the mode's
    # function as arguments: rebinding `os._exit`, `sys.exit` or a module global from the program has no effect on
    # them.
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

    with open(int(sys.argv[1]) if job_fd is None else job_fd, "rb") as job_file:
        job = json.loads(job_file.read())

    sys.path.extend(job.get("sys_path", []))  # started with -S: the environment's packages, without its .pth files
    for name, (soft, hard) in job["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Kernel objects that outlive the sandbox (keyrings, and SysV IPC where no IPC namespace confines it) are closed
    # before the program starts; on an architecture the filter knows, a filter that cannot be installed stops the run.
    filtered = globals()["install_syscall_filter"](block_sysv_ipc=not job.get("ipc_namespace", False))
    if not filtered and os.uname().machine in globals()["_SECCOMP_ARCHES"]:
        exit_now(3)

    mode = job["mode"]
    if mode == "serve":
        fds = (int(sys.argv[2]), int(sys.argv[3])) if serve_fds is None else serve_fds
        _serve(job, fds, exit_now, set_timer, real_timer, base_exception)
    try:
        program = compile(job["program"], _program_file(job["program"]), "exec")
    except base_exception:
        exit_now(1)
    if mode == "io":
        _run_as_main(program, builtins, exit_now, base_exception)
    _run_tests(job, program, builtins, exit_now, set_timer, real_timer, base_exception)


def _program_file(source, folder=None):
    """The program written to `solution.py` in `folder` (the sandbox's private one, where the working directory is
    the folder shared with the judge), else in the working directory: its path (what its code objects, `__file__`,
    `inspect.getsource` and a spawned child's import find), or the bare name where it cannot be written."""
    import os

    path = os.path.join(folder or os.getcwd(), "solution.py")
    try:
        if folder:
            os.makedirs(folder, 0o700, exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            file.write(source)
    except (OSError, ValueError):
        return "solution.py"
    return path


def _program_module(name, path, builtins):
    """The module the program runs in, as Python makes one for a file: registered in `sys.modules` under `name`
    (so pickle finds its functions, classes and enums by module, and a forked child has it), with `__file__`, and
    with its folder on `sys.path` (so a spawned child imports it, as it would `python solution.py`'s)."""
    import os
    import sys
    import types

    module = types.ModuleType(name)
    module.__builtins__ = builtins
    if os.path.isabs(path):
        module.__file__ = path
        sys.path.insert(0, os.path.dirname(path))
    sys.modules[name] = module
    return module


def _run_as_main(program, builtins, exit_now, base_exception):
    """io mode: the program as `__main__`, exiting with its own status."""
    import sys

    namespace = _program_module("__main__", program.co_filename, builtins).__dict__
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


def _run_tests(job, program, builtins, exit_now, set_timer, real_timer, base_exception):
    """asserts and script modes (the weaker fallback): the program, then each test under its own alarm; the exit
    status is `nonce + tests passed`."""
    import signal

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

    solution = _program_module("solution", program.co_filename, builtins).__dict__
    passed = 0
    if run(program, solution):
        test_namespace = {key: value for key, value in solution.items() if key != "__builtins__"}
        test_namespace.update({"__name__": "tests", "__builtins__": clean_builtins})
        if run(setup, test_namespace):
            for test in tests:
                passed += run(test, test_namespace)
    exit_now(nonce + passed)


def _serve(job, fds, exit_now, set_timer, real_timer, base_exception):
    """serve mode: load the program, then answer one request per line (read from `fds[0]`, answered on `fds[1]`)
    until the judge closes the pipe."""
    import os

    # The codec is wire.py, which assembly.py puts in front of this source. Its names are bound before the program
    # loads, as `_run_harness` binds its own, so that a program rebinding the module's globals does not reach them.
    # (The worker is untrusted either way: the judge decodes every reply with its own codec.)
    codec = globals()
    dumps, loads, max_message = codec["dumps"], codec["loads"], codec["MAX_MESSAGE_BYTES"]
    requests = os.fdopen(fds[0], "rb")
    reply_fd = fds[1]
    write = os.write

    def reply(message):
        data = dumps(message)
        while data:
            data = data[write(reply_fd, data) :]

    import builtins as builtins_module

    timed = _call_timer(set_timer, real_timer, base_exception)
    program_file = _program_file(job["program"], job.get("program_dir"))
    namespace = _program_module("solution", program_file, __builtins__).__dict__
    current = [0]  # the number of the judge's latest line: every reply echoes it

    def call_back(callback_id, args, kwargs, encode_value, decode_value):
        """A function the test passed in, called by the program: its arguments go to the judge, which runs it and
        sends its result (or that it raised) on the next line."""
        reply([current[0], "callback", callback_id, [encode_value(a) for a in args],
               [[key, encode_value(value)] for key, value in kwargs.items()]])  # fmt: skip
        line = requests.readline(max_message)
        if not line:
            exit_now(0)
        message = loads(line)
        current[0], outcome, value = message[:3]
        if outcome != "returned":
            raise _callback_exception(value, message[3] if len(message) > 3 else [], builtins_module)()
        return decode_value(value)

    respond = _responder(namespace, codec, call_back)
    try:
        program = compile(job["program"], program_file, "exec")
    except base_exception:
        reply(["load_failed"])
        exit_now(1)
    loaded = timed(job["per_test_s"], lambda: exec(program, namespace) or ())
    reply(["ready"] if loaded[0] == "ok" else ["load_failed"])
    if loaded[0] != "ok":
        exit_now(1)
    while True:
        line = requests.readline(max_message)
        if not line:
            exit_now(0)
        current[0], *request = loads(line)
        outcome = timed(request[-1], lambda: respond(request))  # noqa: B023 (called at once)
        reply([current[0], *outcome])


def _call_timer(set_timer, real_timer, base_exception):
    """`timed(budget, action)`: the action's results under an alarm, as `["ok", *results]`, `["timeout"]` or
    `["raised", type name, message]`. Installs the SIGALRM handler the alarm needs."""
    import signal

    class CallTimeout(base_exception):
        pass

    def on_alarm(signum, frame):
        raise CallTimeout()

    signal.signal(signal.SIGALRM, on_alarm)

    def timed(budget, action):
        try:
            try:
                set_timer(real_timer, max(budget, 0.001))
                return ["ok", *action()]
            finally:
                set_timer(real_timer, 0)
        except CallTimeout:
            return ["timeout"]
        except base_exception as error:
            return ["raised", type(error).__name__, str(error)[:1000], _lineage(type(error))]

    return timed


def _lineage(cls):
    """[[module, qualified name], ...] of an exception's class and its bases, in method resolution order: what the
    judge makes the exception from (the judge's own class where it has one, a look-alike under the nearest base it
    has otherwise). Only a claim, and the judge treats it as one."""
    try:
        return [[str(kind.__module__), str(kind.__qualname__)] for kind in cls.__mro__[:32]]
    except BaseException:  # noqa: BLE001 (a class that will not say: the judge goes by the name alone)
        return []


def _callback_exception(name, bases, builtins_module):
    """The class the program sees for an exception a function of the test's raised: the built-in class of that
    name, else one made under the nearest built-in base it named (as the test's own class would be caught)."""
    found = getattr(builtins_module, str(name), None)
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    for base in bases if type(bases) is list else []:
        found = getattr(builtins_module, str(base), None)
        if isinstance(found, type) and issubclass(found, Exception):
            return type(str(name), (found,), {})
    return type(str(name) if str(name).isidentifier() else "Exception", (Exception,), {})


def _responder(namespace, codec, call_back):
    """`respond(request)`: the answer to one get/call/getattr/text request on the program's namespace, as data.
    Objects that are not data stay here, as handles the judge can name in later requests."""
    encode, decode = codec["encode"], codec["decode"]
    handles = []
    iterators = {}

    def as_data(value):
        def fallback(obj, encode_inner):
            handles.append(obj)
            # A generator or other iterator stays here, unrun: the judge asks for its items one at a time, as the
            # test takes them, so what the test does not consume never runs (as in one process).
            return ["g" if hasattr(type(obj), "__next__") else "h", len(handles) - 1]

        return encode(value, fallback)

    def resolve(handle_id):
        if type(handle_id) is tuple and handle_id[0] == "g":  # never sent by the judge: no iterator of its own
            raise TypeError("not data")
        if type(handle_id) is tuple:  # ("k", id[, name, parameters]): a function of the test's
            callback_id = handle_id[1]

            def callback(*args, **kwargs):
                return call_back(callback_id, args, kwargs, as_data, lambda data: decode(data, resolve))

            if len(handle_id) == 4:
                _as_named(callback, handle_id[2], handle_id[3], decode)
            return callback
        return handles[handle_id]

    def target(spec):  # ["name", global name] or ["h", handle id]
        return namespace[spec[1]] if spec[0] == "name" else handles[spec[1]]

    def respond(request):
        kind = request[0]
        if kind == "get":
            name = request[1]
            if name not in namespace:
                return [False]
            value = namespace[name]
            return [True, as_data(value), _imported_from(value), isinstance(value, type)]
        if kind == "call":
            return _call(request, target, lambda data: decode(data, resolve), as_data)
        if kind == "next":  # up to n items of an object the judge iterates, one batch at a time
            spec, count = request[1], request[2]
            key = repr(spec)
            if key not in iterators:
                iterators[key] = iter(target(spec))
            items = []
            for item in iterators[key]:
                items.append(as_data(item))
                if len(items) >= count:
                    return [items, False]
            return [items, True]
        if kind == "getattr":
            return [as_data(getattr(target(request[1]), request[2]))]
        return [as_data((repr if request[2] == "repr" else str)(target(request[1])))]  # "text"

    return respond


def _as_named(function, name, parameters, decode):
    """Give the stand-in for a test's function the name and signature the test's has (`key.__name__`,
    `inspect.signature(predicate)`); parameters: [[name, kind, has a default, the default as data], ...]."""
    function.__name__ = function.__qualname__ = name
    if parameters is None:
        return
    try:
        import inspect

        empty = inspect.Parameter.empty
        function.__signature__ = inspect.Signature(
            [
                inspect.Parameter(p[0], inspect._ParameterKind(p[1]), default=decode(p[3]) if p[2] else empty)
                for p in parameters
            ]  # fmt: skip
        )
    except Exception:  # noqa: BLE001 (a signature that does not hold together: the name alone)
        pass


def _enter_state(cwd, changed, removed):
    """The test's working directory and environment, as it changed them before this call (in one process the
    program shares them): the directory where this side has it (the shared folder's paths are the same on both)."""
    import os

    try:
        os.chdir(cwd)
    except (OSError, TypeError, ValueError):
        pass
    for key, value in changed:
        try:
            os.environ[key] = value
        except (TypeError, ValueError):
            pass
    for key in removed:
        os.environ.pop(key, None)


def _imported_from(value):
    """[module, qualified name] of a module or class the program imported (the judge imports its own copy instead
    of using the program's), else None. Only a claim: the judge decides what it accepts."""
    if type(value).__name__ == "module":
        module, qualname = getattr(value, "__name__", None), ""
    elif isinstance(value, type):
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    else:
        return None
    if type(module) is str and type(qualname) is str and module != "solution":
        return [module, qualname]
    return None


def _call(request, target, decode, as_data):
    _, spec, args, kwargs, *state, _budget = request
    if state and state[0] is not None:
        _enter_state(*state[0])
    function = target(spec)
    args = [decode(arg) for arg in args]
    kwargs = {key: decode(value) for key, value in kwargs}
    result = function(*args, **kwargs)
    # The arguments after the call, for functions that change them in place (containers only), positional and named.
    changeable = (list, dict, set, bytearray)
    after = [as_data(arg) if type(arg) in changeable else None for arg in args]
    after_named = [as_data(value) if type(value) in changeable else None for value in kwargs.values()]
    # Which argument the result is, where it is one (an in-place sort that returns its list): only a claim.
    returned = next((i for i, arg in enumerate([*args, *kwargs.values()]) if arg is result and type(arg) is list), None)
    return [as_data(result), after, after_named, returned]


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["zygote"]:  # the warm zygote (`zygote.py`, after this file in its source) runs it per attempt
        _run_harness()
