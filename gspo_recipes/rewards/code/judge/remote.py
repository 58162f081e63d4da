"""The judge's end of the sandboxed worker: what the tests hold in place of the program's objects.

Every call into the program goes through `Link.call`: the arguments cross as copies of the judge's own data, the
result comes back as fresh built-in objects (`wire.py`), and the call is counted (a test that never calls the program
cannot pass). What is not data stays in the worker as a `Remote`, which can be called or read but never compared.
"""

from __future__ import annotations

import builtins
import collections
import importlib
import importlib.util
import os
import sys
import time
from typing import Any

from ..sandbox import launch as sandbox
from ..sandbox.inside.wire import NotPlainData, decode, encode
from ..sandbox.worker import SandboxWorker, WorkerGone, WorkerSpec, WorkerStarter
from .broker import WorkerStartsCapped
from .records import JudgeJob

STARTUP_ALLOWANCE_S = 1.0  # sandbox and interpreter start-up, on top of one per-test budget for the program itself
REPLY_GRACE_S = 0.25  # how long past a call's budget the judge waits before it kills the worker
ABSENT = object()

# Exceptions that steer the test's own control flow when they escape a call: `StopIteration` ends a `map` or a
# generator early, so `all(...)` passes. From the program they are failures (as PEP 479 makes them in generators):
# a class made for them, under `Exception`.
_CONTROL_FLOW = {"StopIteration", "StopAsyncIteration"}
# Methods of the built-in data types. A test that calls one on a program's result and checks what it answers expects
# a str, list, set... : on an object of the program's, the program would answer (`.startswith` that always says True),
# a lie like a length or a truth it claims. Refused until the test has used the object as an object: made it from a
# class of the program's by name (`Solution()`, `LRUCache(2)`) or reached it through such an object's methods
# (`Bag().add(1).add(2)`, `stack.clone().pop()`), read an attribute no built-in type has (`stack.push`), or changed it
# through a method whose built-in namesake answers nothing (`_CHANGES`: `queue.append(1)`), after which its methods,
# whatever their names, are its own.
_DATA_METHODS = frozenset(
    name for kind in (str, bytes, list, tuple, dict, set, frozenset, int, float, complex) for name in dir(kind)
)
_CHANGES = frozenset({
    "append", "extend", "insert", "remove", "clear", "sort", "reverse", "add", "discard", "update", "appendleft",
    "extendleft", "rotate", "difference_update", "intersection_update", "symmetric_difference_update",
})  # fmt: skip
# The runner's own variables (pytest names the running test in PYTEST_CURRENT_TEST): never the program's to read.
_JUDGES_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})
# Conventional import aliases: `np` in a test means numpy even where the program imported it.
MODULE_ALIASES = {"np": "numpy", "pd": "pandas", "plt": "matplotlib.pyplot", "mpl": "matplotlib", "sns": "seaborn",
                  "nx": "networkx", "sp": "scipy", "tf": "tensorflow", "dt": "datetime", "it": "itertools"}  # fmt: skip
# Modules the program may name for a test's class: the usual sources of the values tests build their expectations
# from. Never unittest (mock.ANY equals everything) and never a module that does things when imported.
_CLASS_MODULES = {"collections", "fractions", "decimal", "datetime", "itertools", "heapq", "array", "numpy", "re"}
_NEVER_IMPORTED = {"antigravity", "this", "turtle", "tkinter", "idlelib", "webbrowser", "unittest", "gspo_recipes"}
# Modules whose exceptions steer the test's runner (a skip, an expected failure, an abort): never what the program's
# exception becomes. And the names the program's own module goes by in the worker.
_RUNNER_MODULES = {"unittest", "pytest", "_pytest", "pluggy", "gspo_recipes", "doctest", "bdb", "pdb"}
_PROGRAM_MODULES = {"solution", "__main__", "__mp_main__"}
# The names the dataset's code runs under in the judge (the test script's module, the helpers' namespace): a program
# naming them is given a class of its own, never the tests'.
_DATASET_MODULES = {"tests", "helpers", "setup"}


class JudgeFailure(BaseException):  # noqa: N818 (what it is, not an error of the test's)
    """The judge's own failure during a test: the call's or the test's time ran out, the worker was lost or broke
    the protocol, a value was refused (an object of the program's compared, a test's object that cannot cross).
    It derives from BaseException, so `except Exception`, `assertRaises(OSError)` or `pytest.raises(RuntimeError)`
    in a test never catch it; and `judge_failed` counts it before raising, so a test that catches it anyway (a bare
    `except:`) still fails: whether a test passed is the judge's frame's to say (`failures()` before and after)."""


_FAILURES = [0]


def judge_failed(message: str):
    """Count one failure of the judge's and raise it as `JudgeFailure`."""
    _FAILURES[0] += 1
    raise JudgeFailure(message)


def failures() -> int:
    """How many failures of the judge's this process has seen: a test during which it changed did not pass."""
    return _FAILURES[0]


class Remote:
    """Something the program defined, living in the worker. Calls and attribute reads are forwarded and come back
    as plain data (or as another `Remote`), and so are the items of iterating it; everything else (comparison,
    truth, length, hashing) raises: an object the model controls is never what a test compares."""

    __slots__ = ("_generation", "_link", "_open", "_target")

    def __init__(self, link: Link, target: list, generation: int, open_: bool = False):
        self._link, self._target, self._generation, self._open = link, target, generation, open_

    def __call__(self, *args, **kwargs):
        return self._link.call(self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") or self._link.collecting:
            raise AttributeError(name)  # while pytest collects, its look-ups (marks, fixtures, mocks) are not asked
        if name in _DATA_METHODS and name not in _CHANGES and not self._open:
            judge_failed(f"the program's result is not plain data: `.{name}` would be its own, not the built-in's")
        value = self._link.forward(self, ["getattr", self._target, name], open_=True)
        # The test uses it as an object (one it has: the runner's own look-ups, `pytestmark`, fail and open nothing):
        # its methods are its own from now on (see `_DATA_METHODS`).
        self._open = True
        return value

    def __str__(self) -> str:
        return self._link.forward(self, ["text", self._target, "str"])

    def __repr__(self) -> str:
        return self._link.forward(self, ["text", self._target, "repr"])

    def _refuse(self, *args):
        judge_failed("an object of the program's is not plain data: it cannot be compared, counted or tested")

    def __len__(self):
        # A TypeError, not the judge's failure: `list(remote)` asks for a length first and goes on without one
        # only on TypeError.
        raise TypeError("an object of the program's is not plain data: it has no length the judge can trust")

    def __iter__(self):
        if not self._open:
            # A result the test takes as data (`list(evens(6))`, `for x in f()`), which no iterator is: the items an
            # object of the program's claims to hold are its lie to tell, as its length, truth and members are.
            judge_failed("an object of the program's is not plain data: the judge does not iterate it")
        return self._link.iterate(self)

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __contains__ = _refuse
    __index__ = __int__ = __float__ = __hash__ = __getitem__ = __add__ = __radd__ = __sub__ = __mul__ = _refuse


class RemoteIterator(Remote):
    """A generator or other iterator of the program's, left unrun in the worker: each item is asked for when the
    test takes it (`next`, a `for`, `islice`), one at a time, so what the test never consumes never runs."""

    __slots__ = ()

    def __iter__(self):
        return self

    def __next__(self):
        return self._link.next_item(self)


class Link:
    """One row's worker: started lazily, restarted after a crash while the row has time. `calls` counts the calls
    made into the program."""

    def __init__(self, job: JudgeJob, row_deadline: float, start_worker: WorkerStarter | None = None):
        self.job, self.row_deadline, self.start_worker = job, row_deadline, start_worker
        self.worker: SandboxWorker | None = None
        self.generation = 0
        self.failed_to_load = False
        self.capped = False  # the broker started its most workers for this attempt: no more tests can run
        self.calls = 0
        # While pytest collects, it looks attributes up on every name of the test module (marks, fixture markers, mock
        # checks): no program code runs for those, so a program can neither break the collection nor see it.
        self.collecting = False
        self.callbacks: list = []  # functions the tests passed to the program, by the number it calls them with
        self.exception_classes: dict[str, type] = {}  # see `program_exception`: one class per claim, per row
        self.dataset_names: dict = {}  # the tests' namespace (set by the judge)
        self.helper_classes: dict = {}  # the classes the dataset's helpers define (set by the judge), by name
        self.test_deadline = time.monotonic() + job.per_test_s
        # The test's working directory and environment as the worker starts with them (its own start: the shared
        # folder, the sandbox's environment), and what was last sent to the worker of each generation.
        try:
            self._start_cwd = os.getcwd()
        except OSError:
            self._start_cwd = "/"
        self._start_environ = {key: value for key, value in os.environ.items() if key not in _JUDGES_VARIABLES}
        self._state_generation, self._cwd_sent, self._environ_sent = -1, self._start_cwd, self._start_environ

    def ensure(self) -> bool:
        if self.worker is not None and self.worker.alive:
            return True
        startup_s = STARTUP_ALLOWANCE_S + self.job.per_test_s
        if self.failed_to_load or self.capped or time.monotonic() + startup_s > self.row_deadline:
            return False
        try:
            spec = WorkerSpec(self.job.backend, self.job.program, self.job.per_test_s, self.job.limits)
            self.worker = SandboxWorker(spec, self.start_worker)
        except WorkerStartsCapped:
            self.capped = True
            return False
        except OSError as error:  # no process could be started: the machine's failure, not the program's
            raise sandbox.SandboxUnavailable(f"could not start the sandboxed worker: {error}") from error
        self.generation += 1
        try:
            ready = self.worker.receive(startup_s)[0] == "ready"
        except WorkerGone:
            ready = False
        self.failed_to_load = not ready  # a program that cannot load will not load the next time either
        return ready

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def get(self, name: str) -> Any:
        """The program's value for a name the tests use: plain data, a `Remote`, the judge's own copy of a module or
        class the program imported, or `ABSENT`. Objects made by calling a class of the program's answer the methods
        built-in types have (`Stack().pop()`); that is decided by what the name is, never by how it is spelled
        (`Find_Max` is a function like any other)."""
        reply = self._request(["get", name])
        if not reply[0]:
            return ABSENT
        imported = reply[2] if len(reply) > 2 else None
        if imported is not None:
            return judges_copy(name, imported)
        value = self._decode(reply[1])
        is_class = len(reply) > 3 and reply[3] is True
        return Remote(self, ["name", name], 0, open_=is_class) if isinstance(value, Remote) else value

    def call(self, remote: Remote, args: tuple, kwargs: dict) -> Any:
        self._check(remote)
        try:
            sent = [encode(arg, self._outgoing) for arg in args]
            named = [[key, encode(value, self._outgoing)] for key, value in kwargs.items()]
        except NotPlainData as error:  # the judge cannot pass it: its limit, not the program's failure nor the test's
            judge_failed(f"{error}")
        self.calls += 1
        reply = self._request(["call", remote._target, sent, named, self._process_state()])
        result = self._decode(reply[0], open_=remote._open)  # what an object's methods return is an object too
        originals = [*args, *kwargs.values()]
        changes = [*_as_list(reply[1] if len(reply) > 1 else None), *_as_list(reply[2] if len(reply) > 2 else None)]
        returned = reply[3] if len(reply) > 3 else None
        for position, (original, changed) in enumerate(zip(originals, changes)):
            if changed is None:
                continue
            changed = self._decode(changed)
            if returned == position and type(original) is list and result == changed and _rearranged(original, changed):
                # A list the program reordered in place and returned (`xs.sort(); return xs`): the test's own list,
                # reordered now, is the result, as in one process (`sort_in_place(xs) is xs`, `== xs`).
                _update_in_place(original, changed)
                result = original
                continue
            # Any other argument the program changed and returned (or returned a copy of) keeps its value from
            # before the call until the test's statement ends: else `fix(x) == sorted(x)` would compare the result
            # with itself (a `fix` that empties its list). Decided here, on the judge's data, not on the worker's word.
            if result is None or type(result) is not type(changed) or result != changed:
                _update_in_place(original, changed)
            else:
                _after_the_statement(lambda original=original, changed=changed: _update_in_place(original, changed))
        return result

    def _process_state(self) -> list | None:
        """What the test changed of the state a program shares with it in one process, since the worker last heard:
        [working directory, [[name, value] set], [names unset]] of its environment, or None when nothing changed.
        The program's own changes do not come back (see the docs)."""
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = self._start_cwd
        if self._state_generation != self.generation:  # a new worker starts where the judge's test started
            self._state_generation, self._cwd_sent, self._environ_sent = (
                self.generation,
                self._start_cwd,
                self._start_environ,
            )
        environ = {key: value for key, value in os.environ.items() if key not in _JUDGES_VARIABLES}
        if cwd == self._cwd_sent and environ == self._environ_sent:
            return None
        changed = [[key, value] for key, value in environ.items() if self._environ_sent.get(key) != value]
        removed = [key for key in self._environ_sent if key not in environ]
        self._cwd_sent, self._environ_sent = cwd, environ
        return [cwd, changed, removed]

    def iterate(self, remote: Remote):
        """The items of a program's iterable (an endless generator included), fetched a batch at a time as the test
        takes them: each one data the judge decodes. Bounded by the test's deadline, like any call."""
        self._check(remote)
        while True:
            items, done = self._request(["next", remote._target, 64])
            if type(items) is not list:
                judge_failed("the worker sent malformed items")
            yield from (self._decode(item) for item in items)
            if done is True:
                return

    def next_item(self, remote: Remote) -> Any:
        """The next item of a program's iterator, or StopIteration once it has none (`RemoteIterator`)."""
        self._check(remote)
        items, done = self._request(["next", remote._target, 1])
        if type(items) is not list or len(items) > 1:
            judge_failed("the worker sent malformed items")
        if not items:
            raise StopIteration
        return self._decode(items[0])

    def forward(self, remote: Remote, request: list, open_: bool = False) -> Any:
        self._check(remote)
        return self._decode(self._request(request)[0], open_=open_)

    def _check(self, remote: Remote) -> None:
        if remote._link is not self or (remote._generation and remote._generation != self.generation):
            judge_failed("that object belonged to a worker that has since been restarted")

    def _request(self, request: list) -> list:
        """The worker's answer to `request`. Whatever goes wrong on the judge's side of the call (the worker gone
        or out of step, the time up, a malformed reply) is the judge's failure (`judge_failed`), never an exception
        of the test's; what the program raised arrives as `program_exception` makes it."""
        try:
            reply = self._exchange(request)
        except (WorkerGone, NotPlainData) as error:
            if self.worker is not None:
                self.worker.close()
            judge_failed(f"{type(error).__name__}: {error}")
        except TimeoutError as error:
            judge_failed(f"TimeoutError: {error}")
        if reply[0] == "ok":
            return reply[1:]
        kind = self.program_exception(reply[1], reply[3] if len(reply) > 3 else None)
        try:
            error = kind(str(reply[2]))
        except Exception:  # noqa: BLE001 (a class whose constructor wants more than a message: made without it)
            error = kind.__new__(kind, str(reply[2]))
            error.args = (str(reply[2]),)
        raise error

    def _exchange(self, request: list) -> list:
        if self.worker is None or not self.worker.alive:  # restarted between tests only, never under a test's alarm
            raise WorkerGone("the program is not running")
        budget = self._budget()
        reply = self.worker.request([*request, budget], budget + REPLY_GRACE_S)
        while True:
            if reply[0] == "callback" and len(reply) == 4:  # the program calls a function the test passed in
                reply = self.worker.request(self._called_back(*reply[1:]), self._budget() + REPLY_GRACE_S)
            else:
                break
        if reply[0] == "ok" or (reply[0] == "raised" and len(reply) >= 3):
            return reply
        if reply[0] == "timeout":
            raise TimeoutError("the call ran out of time")
        raise WorkerGone("unexpected reply")

    def program_exception(self, name: Any, lineage: Any) -> type:
        """The class a test sees for an exception the program raised, from its name and its classes' lineage
        (`[[module, qualified name], ...]`, the class first, as the worker claims them), by identity, as in one
        process: the built-in class itself when it is one (`SystemExit`, `KeyboardInterrupt` and `GeneratorExit`
        included, which `except Exception` does not catch); a class of a module the judge has imported
        (`json.JSONDecodeError`); a class of the dataset's helpers the tests use (the prompt's `BankError`, which in
        one process is the program's own); else a class made here for it, named as the program's and equal to no
        class of the test script, under the nearest of its bases the judge has (a `ValueError` subclass stays a
        `ValueError`). Never a class that steers the test's runner (pytest's, unittest's), nor `StopIteration`
        (a class made for it under `Exception`)."""
        claims = _claimed_lineage(name, lineage)
        key = repr(claims)
        if key not in self.exception_classes:
            found = [self._judges_exception(module, qualname) for module, qualname in claims]
            if found[0] is not None:
                self.exception_classes[key] = found[0]
            else:
                base = next((cls for cls in found[1:] if cls is not None), Exception)
                module, qualname = claims[0]
                made = type(qualname.rsplit(".", 1)[-1], (base,), {"__module__": module, "__qualname__": qualname})
                self.exception_classes[key] = made
        return self.exception_classes[key]

    def _judges_exception(self, module: str, qualname: str) -> type | None:
        if module == "builtins":
            found = getattr(builtins, qualname, None) if qualname not in _CONTROL_FLOW else None
        elif module in _PROGRAM_MODULES:
            # The program's own class: the dataset's only where the helpers define it and the tests use the helpers'
            # (in one process the prompt's code is the program's); a class the test script defines never is.
            found = self.helper_classes.get(qualname)
            if found is None or self.dataset_names.get(qualname) is not found:
                found = None
        elif module.split(".")[0] in _RUNNER_MODULES | _DATASET_MODULES or module not in sys.modules:
            found = None
        else:
            found = sys.modules[module]
            for part in qualname.split("."):
                found = getattr(found, part, None)
        return found if isinstance(found, type) and issubclass(found, BaseException) else None

    def _budget(self) -> float:
        budget = self.test_deadline - time.monotonic()
        if budget <= 0:
            raise TimeoutError("the test's time is up")
        return budget

    def _called_back(self, callback_id: Any, args: Any, kwargs: Any) -> list:
        """Run the test's function on the program's arguments (decoded data, as results are) and answer with its
        result as data, or that it raised: the message the worker waits for before the program goes on."""
        if type(callback_id) is not int or not 0 <= callback_id < len(self.callbacks):
            raise WorkerGone("a call back to a function the test never passed")
        if type(args) is not list or type(kwargs) is not list:
            raise WorkerGone("malformed call back")
        try:
            named = {str(pair[0]): self._decode(pair[1]) for pair in kwargs}
            result = self.callbacks[callback_id](*[self._decode(arg) for arg in args], **named)
            return ["returned", encode(result, self._outgoing)]
        except Exception as error:  # noqa: BLE001 (the test's function raised: the program sees that it did)
            # Its name and the built-in classes it derives from: the worker raises the built-in class of that name,
            # or one made under the nearest built-in base (never a bare RuntimeError).
            bases = [cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins"]
            return ["raised", type(error).__name__, bases]

    def _decode(self, data: Any, open_: bool = False) -> Any:
        def handle(handle_id):
            if type(handle_id) is tuple and len(handle_id) == 2 and handle_id[0] == "g":
                return RemoteIterator(self, ["h", handle_id[1]], self.generation, True)
            if type(handle_id) is not int:
                raise NotPlainData("a function of the test's cannot come back from the program")
            return Remote(self, ["h", handle_id], self.generation, open_)

        try:
            return decode(data, handle)
        except NotPlainData as error:
            judge_failed(f"the worker sent what is not data: {error}")

    def _outgoing(self, value: Any, encode_inner) -> list:
        if isinstance(value, Remote) and value._target[0] == "h":
            self._check(value)
            return value._target
        if callable(value) and not isinstance(value, Remote):
            # A function the test passes (a key, a predicate): the program calls it back, across the boundary, as a
            # stand-in with its name and signature.
            self.callbacks.append(value)
            return ["k", len(self.callbacks) - 1, *_name_and_parameters(value)]
        raise NotPlainData(f"a {type(value).__name__} cannot be passed to the program")


def _name_and_parameters(function: Any) -> list:
    """[name, [[name, kind, has a default, the default as data], ...]] of a test's function, for its stand-in in the
    worker (`harness._as_named`); a default that is not data crosses as None, a signature Python cannot tell as
    none."""
    import inspect

    name = getattr(function, "__name__", None)
    name = name[:200] if type(name) is str and name else type(function).__name__
    try:
        parameters = list(inspect.signature(function).parameters.values())[:64]
    except (TypeError, ValueError):  # a built-in such as `int`: the name alone
        return [name, None]
    described = []
    for parameter in parameters:
        has_default = parameter.default is not inspect.Parameter.empty
        try:
            default = encode(parameter.default) if has_default else None
        except NotPlainData:
            default = None
        described.append([parameter.name, int(parameter.kind), has_default, default])
    return [name, described]


def _claimed_lineage(name: Any, lineage: Any) -> list[tuple[str, str]]:
    """The worker's claim about an exception's classes, as (module, qualified name) pairs, the class first; a
    malformed claim is the bare name, as a built-in."""

    def well_formed(entry):
        return type(entry) is list and len(entry) == 2 and all(type(part) is str and part for part in entry)

    if type(lineage) is list and lineage and all(well_formed(entry) for entry in lineage):
        return [(module, qualname) for module, qualname in lineage[:32]]
    return [("builtins", name if type(name) is str and name.isidentifier() else "Exception")]


def judges_copy(name: str, imported: Any) -> Any:
    """The judge's own module (or class) for a name the tests use unimported and the program imported; `ABSENT`
    when the claim is malformed or not one the judge accepts. A module is accepted only when the judge has it
    already (the tests' own modules and aliases are imported by their names, see `judge.py`); a class only from the
    judge's fixed list of modules: the program's imports never choose what the judge imports (naming an entry point
    `torch.utils._sympy.solve` would import torch)."""
    if type(imported) is not list or len(imported) != 2 or not all(type(part) is str for part in imported):
        return ABSENT
    module_name, qualname = imported
    top = module_name.split(".")[0]
    if top in _NEVER_IMPORTED or top.startswith("_") or not top.isidentifier():
        return ABSENT
    if qualname:  # a class: from the usual modules, under its own name
        if top not in _CLASS_MODULES or qualname != name:
            return ABSENT
    elif name not in (top, module_name.split(".")[-1]) or module_name not in sys.modules:
        return ABSENT  # a module the judge has not imported itself: it imports nothing a program names
    if top not in sys.modules and importlib.util.find_spec(top) is None:
        return ABSENT
    try:
        value = importlib.import_module(module_name)
        return getattr(value, qualname) if qualname else value
    except Exception:  # noqa: BLE001 (a module that fails to import here is simply not there for the tests)
        return ABSENT


def _rearranged(before: list, after: list) -> bool:
    """Whether `after` holds the items of `before`, each as many times, in any order (a sort, a reverse, a shuffle)."""
    if len(before) != len(after) or len(before) > 100_000:
        return False
    try:
        return collections.Counter(before) == collections.Counter(after)
    except TypeError:  # unhashable items (lists of lists): compared by count, for lists of a size that allows it
        return len(before) <= 2_000 and all(before.count(item) == after.count(item) for item in after)


def _as_list(value: Any) -> list:
    return value if type(value) is list else []


def _after_the_statement(action) -> None:
    """Run `action` when the test's frame that made the current call reaches its next line (or returns): the end
    of the statement, as the test reads it. Uses the frame's own trace hook (`frame.f_trace`), which Python calls only
    while a thread trace function is set, so one is set for that long (it traces no other frame)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        action()
        return
    previous_global = sys.gettrace()
    previous_local = frame.f_trace

    def on_event(event_frame, event, arg):
        if event in ("line", "return"):
            event_frame.f_trace = previous_local
            sys.settrace(previous_global)
            action()
            return previous_local
        return on_event

    if previous_global is None:
        sys.settrace(lambda *_: None)
    frame.f_trace_lines = True
    frame.f_trace = on_event


def _update_in_place(original: Any, changed: Any) -> None:
    """Carry a call's changes to a list, dict, set or bytearray argument back to the test's own object."""
    if type(original) is not type(changed):
        return
    if isinstance(original, (list, bytearray)):
        original[:] = changed
    elif isinstance(original, (dict, set)):
        original.clear()
        original.update(changed)
