"""Slurm through its REST API (``slurmrestd`` with ``auth/jwt``) instead of the command-line tools.

Centres that let no service log in to a login node often run ``slurmrestd``. :class:`SlurmRestTransport` holds where
it is (URL, API version), who asks (the user name and the JWT, the token never shown: not in ``repr``, not in
:meth:`~SlurmRestTransport.describe`, not in any error) and what every job gets that ``sbatch`` would have taken
from the submitting shell (its environment and working directory). :class:`SlurmRestClient` is the
:class:`~airflow_provider_gpusched.core.slurm.client.SlurmClient` of that transport: the same operations, the same
:class:`~airflow_provider_gpusched.core.slurm.states.JobStatus` records, through these endpoints (API v0.0.38,
Slurm 22.05 and 23.02):

=====================================  =========================================================================
``POST job/submit``                     submit: the script, and the job's options as the API's properties
``GET jobs``                            the status of every tracked job: **one call per poll**, whatever their number
``DELETE job/{id}``                     cancel (with a signal)
``GET partitions``, ``GET nodes``       the connection test, ``health``, GPUs per partition
``GET ping``                            the connection test: reachable, token accepted, API version spoken
=====================================  =========================================================================

The job's options are translated from the same ``sbatch`` argument list the CLI path submits
(:meth:`SlurmJobSpec.sbatch_argv`), so both transports submit one definition of the job. An option the API has no
property for (``--nodelist``, ``--exclude`` in v0.0.38) is refused, naming it, before anything is sent.

What the API cannot do, and how this client does it instead:

* ``--signal=B:...`` (the batch shell signalled: the time-limit chain) is refused by slurmrestd 22.05's parser. The
  job is submitted with the signal for its steps, and the chain's wrapper signals the batch shell itself at the same
  moment (``self_signal``, core/slurm/chain_shim.py), from the job's own end time.
* Requeue: the time-limit chain requeues from inside the job (``scontrol requeue`` on the compute node), as on every
  transport.
* Output files and the chain's records are read from this host's view of the cluster's shared file system (a
  research cluster's ``/home`` or ``/scratch`` mounted where Airflow runs); there is no file endpoint.
* A job that left slurmctld's memory (``MinJobAge``, 300 s by default) is not found: the REST API of 22.05 reads the
  accounting database only through slurmdbd's endpoints, which this client does not use. A tracked job is polled
  long before that.

Every request is one bounded exchange (core/http.py): ``timeout`` seconds for all of it, an answer of at most
:attr:`SlurmRestTransport.max_answer_bytes`, redirects within slurmrestd's origin only (the token is sent nowhere
else), JSON nested at most 64 deep with no number over 40 digits. What an answer says of a job is text for people:
control characters are shown escaped; counts past Slurm's own (a restart count over 65,535, a node's GPUs over
65,536) are refused naming the field.

Pure Python (the standard library), no Airflow imports.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_gpusched.core.errors import InvalidArgumentError, brief_repr
from airflow_provider_gpusched.core.http import (
    HttpAnswerError,
    HttpError,
    HttpUnreachableError,
    Response,
    exchange,
)
from airflow_provider_gpusched.core.job_shape import gres_gpu_count
from airflow_provider_gpusched.core.slurm.client import (
    TOO_BIG,
    AccountingInfo,
    NodeSize,
    SlurmClient,
    SubmittedJob,
    check_job_ids,
)
from airflow_provider_gpusched.core.slurm.job import COMMENT_PREFIX, SlurmJobSpec, parse_job_comment
from airflow_provider_gpusched.core.slurm.states import JobStatus, classify_state, normalize_state
from airflow_provider_gpusched.core.slurm.transport import (
    SlurmCommandError,
    SlurmTransport,
    SlurmUnavailableError,
    is_transient_failure,
)
from airflow_provider_gpusched.core.text import printable
from airflow_provider_gpusched.core.units import time_limit_seconds

log = logging.getLogger(__name__)

#: the API version this client speaks (slurmrestd's openapi/v0.0.38 plugin: Slurm 22.05 and 23.02)
API_VERSION = "v0.0.38"
SUPPORTED_VERSIONS = (API_VERSION,)
#: Slurm's "Invalid job id specified"
_INVALID_JOB_ID = 2017
_ID_IN_PATH = re.compile(r"/[^/]*\d[^/]*$")
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
_LIVE = frozenset(
    [
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESIZING",
    ]
)


class SlurmRestError(SlurmCommandError):
    """slurmrestd refused a request, or answered with errors: the message names the endpoint (and the job)."""

    def __init__(self, endpoint: str, status: int, message: str) -> None:
        self.endpoint = endpoint
        self.status = status
        self.detail = message
        super().__init__([endpoint], status, message)
        self.args = (f"{endpoint}: {message}",)

    def __str__(self) -> str:
        return str(self.args[0])


class SlurmRestUnavailableError(SlurmRestError, SlurmUnavailableError):
    """slurmrestd (or slurmctld behind it) could not be reached: try again later."""


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT (``exp``, ``sun``: Slurm's user name), read without checking the signature (slurmctld
    checks it); {} when the token is not a JWT."""
    try:
        payload = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class SlurmRestTransport(SlurmTransport):
    """Where slurmrestd is and who asks it (see the module's docstring). ``calls`` counts requests by endpoint
    (``"GET jobs"``...)."""

    url: str = ""
    user: str = ""
    token: str = field(default="", repr=False, compare=False)
    api_version: str = API_VERSION
    #: every job's environment (the API starts jobs with no other): PATH at least
    environment: dict[str, str] = field(default_factory=lambda: {"PATH": "/usr/local/bin:/usr/bin:/bin"})
    #: a job's working directory when it names none (the API needs one)
    working_dir: str = "/tmp"
    #: the Airflow connection the token comes from (a trigger looks it up again; the token is never carried)
    conn_id: str | None = None
    #: the largest answer read (``GET jobs`` lists every job of the cluster: about 5 KB each)
    max_answer_bytes: ClassVar[int] = 256 << 20

    def __post_init__(self) -> None:
        self.url = str(self.url).rstrip("/")
        if not _URL.match(self.url):
            raise InvalidArgumentError("rest_url", self.url, "slurmrestd's URL, such as http://login1:6820")
        if not self.user or not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", str(self.user)):
            raise InvalidArgumentError("login", self.user, "the Slurm user name the token was made for")
        if self.api_version not in SUPPORTED_VERSIONS:
            raise InvalidArgumentError("api_version", self.api_version, f"one of {', '.join(SUPPORTED_VERSIONS)}")
        if not isinstance(self.environment, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.environment.items()
        ):
            raise InvalidArgumentError("job_environment", self.environment, "a mapping of names to strings")
        if not isinstance(self.working_dir, str) or not self.working_dir.startswith("/"):
            raise InvalidArgumentError("working_dir", self.working_dir, "an absolute directory on the cluster")

    @property
    def target(self) -> str:
        return self.url

    @property
    def is_local(self) -> bool:
        """Files (output, the chain's records) are read on this host: the cluster's shared file system."""
        return True

    def run(self, argv: Sequence[str], **_: Any) -> Any:
        raise SlurmCommandError(
            list(argv), 127, f"{argv[0]}: the REST transport ({self.url}) runs no Slurm commands on this host"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "timeout": self.timeout,
            "rest_url": self.url,
            "user": self.user,
            "api_version": self.api_version,
            "environment": dict(self.environment),
            "working_dir": self.working_dir,
            "conn_id": self.conn_id,
        }

    # -- requests ---------------------------------------------------------------------------------------------
    def token_problem(self) -> str | None:
        """What is wrong with the token as far as can be told here (missing, expired, for another user)."""
        if not self.token:
            return "no token: put a JWT (scontrol token username=USER lifespan=SECONDS) in the connection's password"
        claims = token_claims(self.token)
        if not claims:
            return "the token is not a JWT (expected what `scontrol token` prints after SLURM_JWT=)"
        exp = claims.get("exp")
        if isinstance(exp, (int, float)) and exp <= time.time():
            when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(exp))
            return f"the token expired at {when}: make a new one (scontrol token lifespan=SECONDS) for the connection"
        user = claims.get("sun")
        if isinstance(user, str) and user != self.user:
            return f"the token was made for user {user!r}, the connection says {self.user!r}"
        return None

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        what: str = "",
        allow_errors: Iterable[int] = (),
        done_if: str | None = None,
    ) -> dict[str, Any]:
        """One request to ``/slurm/VERSION/PATH``; its JSON answer. Failures name the endpoint (and ``what``, the
        job), never the token; Slurm errors whose number is in ``allow_errors`` are not failures, nor any where the
        answer has the key ``done_if`` (a job id: the job was submitted, the errors are notes such as "held")."""
        label = method + " " + _ID_IN_PATH.sub("/{id}", path)
        endpoint = f"{method} {self.url}/slurm/{self.api_version}/{path}"
        with self._lock:
            self.calls[label] += 1
        url = f"{self.url}/slurm/{self.api_version}/{urllib.parse.quote(path)}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = "application/json"
        subject = f" ({what})" if what else ""
        resp = self._exchange(method, url, data, headers, endpoint, subject)
        status, text = resp.status, resp.text()
        if status == 401:
            hint = self.token_problem() or "check the connection's login (the Slurm user) and token"
            raise SlurmRestError(endpoint, status, f"slurmrestd refused the credentials{subject}: {hint}")
        if status == 404 and not text.lstrip().startswith("{"):
            raise SlurmRestError(endpoint, status, f"no such endpoint{subject}: {self.version_hint()}")
        try:
            answer = resp.json(label) if text.strip() else {}
        except HttpAnswerError as exc:
            raise SlurmRestError(
                endpoint, status, f"not a JSON answer{subject} (HTTP {status}): {exc}; it begins {text[:200]!r}"
            ) from None
        if not isinstance(answer, dict):
            raise SlurmRestError(endpoint, status, f"unexpected answer{subject}: {text[:200]!r}")
        allowed = set(allow_errors)
        every = [e for e in answer.get("errors") or [] if isinstance(e, dict)]
        errors = [e for e in every if e.get("error_number", e.get("error_code")) not in allowed]
        if done_if and answer.get(done_if) is not None and status < 400:
            for e in errors:
                log.info("%s%s: %s", endpoint, subject, printable(str(e.get("error") or e))[:500])
            errors = []
        if errors or (status >= 400 and not every):
            message = printable(
                "; ".join(
                    " ".join(str(e.get(k)) for k in ("error", "description") if e.get(k)) or json.dumps(e)
                    for e in errors
                )[:2000]
                or f"HTTP {status}"
            )
            if is_transient_failure(1, message):
                raise SlurmRestUnavailableError(endpoint, status, f"Slurm is unreachable{subject}: {message}")
            problem = self.token_problem()
            if problem or (status >= 500 and "Unspecified error" in message):
                # slurmctld refuses a bad token with 'Unspecified error' from slurm_load_*, not with a 401
                message += f" ({problem or 'Slurm answers so when it refuses the token: check it is this cluster’s'})"
            raise SlurmRestError(endpoint, status, f"Slurm answered with errors{subject}: {message}")
        return answer

    def _exchange(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str], endpoint: str, subject: str
    ) -> Response:
        """One bounded exchange (core/http.py): ``timeout`` for all of it, :attr:`max_answer_bytes`, redirects within
        slurmrestd's origin only (the token goes nowhere else). Failures name the endpoint, never the token."""
        try:
            return exchange(
                method, url, body=data, headers=headers, timeout=self.timeout, max_bytes=self.max_answer_bytes
            )
        except HttpUnreachableError as exc:
            raise SlurmRestUnavailableError(
                endpoint, -1, f"cannot reach slurmrestd at {self.url}{subject}: {exc}"
            ) from None
        except HttpError as exc:
            raise SlurmRestError(endpoint, -1, f"slurmrestd at {self.url}{subject}: {exc}") from None

    def _headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token, "Accept": "application/json"}

    def version_hint(self) -> str:
        """Which API versions the server offers, read from its OpenAPI document."""
        url = f"{self.url}/openapi/v3"
        try:
            paths = self._exchange("GET", url, None, self._headers(), f"GET {url}", "").json("GET openapi/v3")["paths"]
            if not isinstance(paths, dict):
                raise TypeError
        except (SlurmRestError, HttpError, KeyError, TypeError):
            return f"the server at {self.url} may not speak API {self.api_version}, or the URL is not slurmrestd's"
        offered = sorted({m.group(1) for p in paths if (m := re.match(r"^/slurm/(v[0-9.]+)/", p))})
        if self.api_version in offered:
            return f"the server speaks API {self.api_version} but not this endpoint"
        return (
            f"the server speaks API {', '.join(offered) or 'none under /slurm/'}, not {self.api_version} "
            f"(this client speaks {', '.join(SUPPORTED_VERSIONS)}): load slurmrestd's openapi/{self.api_version} plugin"
        )


# -- the job's options: sbatch's arguments, as the API's job properties ------------------------------------------
def _int(value: str, option: str) -> int:
    if not re.match(r"^-?\d+$", value):
        raise InvalidArgumentError(f"sbatch option {option}", value, "a whole number")
    return int(value)


def _minutes(value: str, option: str) -> int:
    seconds = time_limit_seconds(value, argument=f"sbatch option {option}")
    return 0 if seconds is None else -(-int(seconds) // 60)


def _mem_mb(value: str, option: str) -> int:
    match = re.match(r"^(\d+)([KMGT]?)B?$", value.upper())
    if not match:
        raise InvalidArgumentError(f"sbatch option {option}", value, "a size such as 4000M or 16G")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[match.group(2)]
    return max(1, int(int(match.group(1)) * scale))


def _nodes(value: str, option: str) -> str:
    """A node count or range as text: 22.05 reads ``"2"`` and ``"2-4"``; the schema's ``[min, max]`` is ignored."""
    parts = value.split("-")
    if len(parts) > 2 or not all(p.isdigit() for p in parts):
        raise InvalidArgumentError(f"sbatch option {option}", value, "a node count N or a range MIN-MAX")
    return value


def _signal(value: str, option: str) -> str:
    """``[B:]SIG@TIME`` -> ``SIG@TIME`` (22.05's parser refuses ``B:``; the chain's wrapper signals the batch shell)."""
    match = re.match(r"^(?:B:)?(?:SIG)?([A-Z0-9]+)(@\d+)?$", value.upper())
    if not match:
        raise InvalidArgumentError(f"sbatch option {option}", value, "[B:]SIGNAL[@SECONDS]")
    name = match.group(1)
    return f"{name if name.isdigit() else 'SIG' + name}{match.group(2) or ''}"


#: sbatch's long option -> (the API's property, how its value is read)
_VALUED: dict[str, tuple[str, Any]] = {
    "job-name": ("name", str),
    "partition": ("partition", str),
    "qos": ("qos", str),
    "account": ("account", str),
    "gres": ("gres", str),
    "cpus-per-task": ("cpus_per_task", _int),
    "mem": ("memory_per_node", _mem_mb),
    "mem-per-cpu": ("memory_per_cpu", _mem_mb),
    "mem-per-gpu": ("memory_per_gpu", _mem_mb),
    "time": ("time_limit", _minutes),
    "array": ("array", str),
    "nodes": ("nodes", _nodes),
    "ntasks": ("tasks", _int),
    "ntasks-per-node": ("tasks_per_node", _int),
    "gpus": ("gpus", str),
    "gpus-per-node": ("gpus_per_node", str),
    "gpus-per-task": ("gpus_per_task", str),
    "cpus-per-gpu": ("cpus_per_gpu", str),
    "constraint": ("constraints", str),
    "nice": ("nice", _int),
    "open-mode": ("open_mode", str),
    "output": ("standard_output", str),
    "error": ("standard_error", str),
    "input": ("standard_input", str),
    "chdir": ("current_working_directory", str),
    "comment": ("comment", str),
    "signal": ("signal", _signal),
    "dependency": ("dependency", str),
    "reservation": ("reservation", str),
    "licenses": ("licenses", str),
    "wckey": ("wckey", str),
    "mail-type": ("mail_type", str),
    "mail-user": ("mail_user", str),
    "deadline": ("deadline", str),
    "exclusive": ("exclusive", str),
}
_FLAGS: dict[str, tuple[str, Any]] = {
    "exclusive": ("exclusive", "true"),
    "requeue": ("requeue", True),
    "no-requeue": ("requeue", False),
    "hold": ("hold", True),
    "parsable": ("", None),
}
_SHORT = {
    "-J": "job-name",
    "-p": "partition",
    "-q": "qos",
    "-A": "account",
    "-c": "cpus-per-task",
    "-t": "time",
    "-a": "array",
    "-N": "nodes",
    "-n": "ntasks",
    "-G": "gpus",
    "-C": "constraint",
    "-o": "output",
    "-e": "error",
    "-D": "chdir",
    "-d": "dependency",
}


def job_properties(argv: Sequence[str], transport: SlurmRestTransport) -> dict[str, Any]:
    """The API's job properties for sbatch's arguments ``argv`` (the spec's, then the user's ``sbatch_args``), with
    the transport's environment and working directory where the job names none. An option the API cannot take is
    refused, naming it."""
    props: dict[str, Any] = {}
    args = [str(a) for a in argv]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in _SHORT:
            if i >= len(args):
                raise InvalidArgumentError(f"sbatch option {arg}", None, "a value after it")
            name, value = _SHORT[arg], args[i]
            i += 1
        elif arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            if not sep:
                if name in _FLAGS:
                    key, flag = _FLAGS[name]
                    if key:
                        props[key] = flag
                    continue
                if name in _VALUED and i < len(args):
                    value = args[i]
                    i += 1
                else:
                    raise InvalidArgumentError("sbatch option", arg, _supported())
        else:
            raise InvalidArgumentError("sbatch option", arg, _supported())
        if name not in _VALUED:
            raise InvalidArgumentError("sbatch option", f"--{name}", _supported())
        key, read = _VALUED[name]
        parsed = read(value) if read is str else read(value, f"--{name}")
        if key == "gres" and "gres" in props:
            parsed = f"{props['gres']},{parsed}"
        props[key] = parsed
    props.setdefault("current_working_directory", transport.working_dir)
    props.setdefault("name", "sbatch")  # what sbatch names a job read from its standard input
    props["environment"] = dict(transport.environment)
    return props


def _supported() -> str:
    known = ", --".join(sorted({*_VALUED, *_FLAGS} - {"parsable"}))
    return (
        "an option slurmrestd's job properties can carry (the REST transport cannot submit --nodelist, --exclude or "
        f"options not listed here; use the CLI or ssh transport for them): --{known}"
    )


def _exit_status(raw: Any) -> tuple[int | None, int | None]:
    """The API's ``exit_code`` is a wait status (3 << 8 for ``exit 3``; 15 for SIGTERM)."""
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw < 1 << 32:
        return None, None
    if raw & 0x7F:
        return 0, raw & 0x7F
    return raw >> 8, None


#: the largest counts believed from slurmrestd: Slurm keeps a job's restart count in 16 bits; a node's GPUs; any
#: other count (CPUs, memory in MB, nodes) in 64 bits
MAX_RESTARTS = 65535
MAX_NODE_GPUS = 65536
MAX_COUNT = (1 << 64) - 1


def _count(value: Any, where: str = "", field_name: str = "", limit: int = MAX_COUNT) -> int:
    """A number the API gives as it is (v0.0.38) or as ``{"set": true, "number": N}`` (later versions); 0 if neither.
    Past ``limit`` (or below 0) a :class:`SlurmRestError` names ``where`` (the endpoint and record) and the field."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if not isinstance(value, int) or isinstance(value, bool):
        return 0
    if not 0 <= value <= limit:
        raise SlurmRestError(
            where, 0, f"{field_name} is {brief_repr(value)}: expected a whole number from 0 to {limit}"
        )
    return value


def _node_gpus(node: Mapping[str, Any]) -> int:
    """The GPUs in a node's ``gres``; a count past :data:`MAX_NODE_GPUS` is refused naming the node."""
    gres = _text(node.get("gres"))
    where = f"GET nodes: node {_text(node.get('name'))!r}"
    if re.search(r"\d{10}", gres):  # a 5,000-digit count is no node's (and int() would refuse to read it)
        return _count(MAX_NODE_GPUS + 1, where, f"gres {brief_repr(gres)}: its GPU count", MAX_NODE_GPUS)
    return _count(gres_gpu_count(gres), where, f"gres {gres!r}: its GPU count", MAX_NODE_GPUS)


def _text(value: Any) -> str:
    """A value of slurmrestd's as text for people: control characters (ESC, BEL, CR, LF, NUL) shown escaped, so
    that a job name or reason cannot rewrite the task log's lines or the terminal showing them."""
    return "" if value is None else printable(str(value))


@dataclass
class SlurmRestClient(SlurmClient):
    """:class:`SlurmClient` through slurmrestd (see the module's docstring)."""

    runner: SlurmRestTransport = field(default=None)  # type: ignore[assignment]

    #: the endpoint that reads every job's status (counted in ``runner.calls``)
    status_call = "GET jobs"

    def __post_init__(self) -> None:
        if not isinstance(self.runner, SlurmRestTransport):
            raise InvalidArgumentError("runner", self.runner, "a SlurmRestTransport")

    # -- submission -------------------------------------------------------------------------------
    def submit(self, spec: SlurmJobSpec) -> SubmittedJob:
        argv = [a for a in spec.sbatch_argv() if a != "--parsable"]
        body = {"script": spec.render_script(batch_signal=False), "job": job_properties(argv, self.runner)}
        what = f"job {spec.job_name!r}" if spec.job_name else "a job"
        try:
            answer = self.runner.request("POST", "job/submit", body=body, what=what, done_if="job_id")
        except SlurmRestUnavailableError:
            raise
        except SlurmRestError as exc:
            detail = exc.detail
            if any(words in detail.lower() for words in TOO_BIG):
                detail += self.too_big_hint(spec, argv)
            raise SlurmRestError(
                exc.endpoint, exc.status, f"Slurm rejected the job: {detail} (sbatch options: {' '.join(argv)})"
            ) from None
        job_id = answer.get("job_id")
        if not isinstance(job_id, int):
            raise SlurmRestError("POST job/submit", 0, f"slurmrestd answered no job id: {json.dumps(answer)[:300]}")
        return SubmittedJob(job_id=str(job_id))

    # -- status -----------------------------------------------------------------------------------
    def accounting(self) -> AccountingInfo:
        """No accounting record is read over REST (see the module's docstring)."""
        if self._accounting is None:
            self._accounting = AccountingInfo(storage_type="accounting_storage/none")
        return self._accounting

    def _jobs(self) -> list[dict[str, Any]]:
        answer = self.runner.request("GET", "jobs", what="the status of every job")
        jobs = answer.get("jobs")
        if not isinstance(jobs, list):
            raise SlurmRestError("GET jobs", 0, f"the answer has no job list: {json.dumps(answer)[:300]}")
        return [j for j in jobs if isinstance(j, dict)]

    @staticmethod
    def _key(job: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
        """A job record's key as the CLI path keys it (``ID``, ``ARRAYID_TASK``) and its array ids."""
        raw, array, task = job.get("job_id"), job.get("array_job_id"), job.get("array_task_id")
        if isinstance(task, int) and isinstance(array, int) and array:
            return f"{array}_{task}", str(array), str(task)
        if isinstance(array, int) and array and job.get("array_task_string"):  # the array's pending remainder
            return f"{array}_[{_text(job['array_task_string'])}]", str(array), None
        return _text(raw), None, None

    def _status(self, job: Mapping[str, Any]) -> JobStatus:
        key, array, task = self._key(job)
        state = normalize_state(_text(job.get("job_state")))
        phase = classify_state(state)
        code, sig = _exit_status(job.get("exit_code")) if phase.is_terminal else (None, None)
        start, end = job.get("start_time"), job.get("end_time")
        elapsed = None
        if isinstance(start, int) and start > 0:
            stop = end if phase.is_terminal and isinstance(end, int) and end >= start else time.time()
            elapsed = max(0.0, float(stop - start))
        return JobStatus(
            job_id=key,
            phase=phase,
            state=state,
            reason="" if job.get("state_reason") in (None, "None") else _text(job.get("state_reason")),
            exit_code=code,
            signal=sig,
            restarts=_count(job.get("restart_cnt"), f"GET jobs: job {key}", "restart_cnt", MAX_RESTARTS),
            partition=_text(job.get("partition")),
            nodes=_text(job.get("nodes")),
            name=_text(job.get("name")),
            elapsed=elapsed,
            array_job_id=array,
            array_task_id=task,
            source="rest",
        )

    def squeue(self, job_ids: Iterable[str]) -> list[JobStatus]:
        """One ``GET jobs`` for all ``job_ids`` (array jobs expand to one entry per task), with exit codes."""
        wanted = {j.split("_")[0] for j in check_job_ids(job_ids)}
        if not wanted:
            return []
        statuses = []
        for job in self._jobs():
            key, array, task = self._key(job)
            if (array or key) not in wanted:
                continue
            if array and task is None:  # pending tasks not yet split off: the CLI's squeue -r lists none either
                continue
            statuses.append(self._status(job))
        return statuses

    def completion_records(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        return {}

    def _scontrol_exit_code(self, job_id: str) -> tuple[int | None, int | None]:
        return None, None

    # -- lookup, cancel, output -------------------------------------------------------------------
    def _mine(self) -> list[dict[str, Any]]:
        """This user's unfinished jobs."""
        return [
            j
            for j in self._jobs()
            if j.get("user_name") == self.runner.user and normalize_state(_text(j.get("job_state"))) in _LIVE
        ]

    def find_live_jobs(self, comment_prefix: str) -> list[tuple[str, str]]:
        found: dict[str, str] = {}
        for job in self._mine():
            comment = _text(job.get("comment"))
            if comment.startswith(comment_prefix):
                key, array, _ = self._key(job)
                found.setdefault(array or key, comment)
        return sorted(found.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)

    def provider_jobs(self) -> list[dict[str, Any]]:
        jobs = []
        for job in self._mine():
            comment = _text(job.get("comment"))
            if not comment.startswith(COMMENT_PREFIX):
                continue
            status = self._status(job)
            count = _count(job.get("node_count"), f"GET jobs: job {status.job_id}", "node_count") or None
            jobs.append(
                {
                    "job_id": status.job_id,
                    "state": status.state,
                    "reason": status.reason,
                    "restarts": status.restarts,
                    "partition": status.partition,
                    "nodes": status.nodes,
                    "elapsed": status.elapsed,
                    "output": _text(job.get("standard_output")),
                    "comment": comment,
                    "node_count": count,
                    "fields": parse_job_comment(comment),
                    "name": status.name,
                }
            )
        return jobs

    def output_path(self, job_id: str) -> str | None:
        check_job_ids([job_id])
        try:
            answer = self.runner.request("GET", f"job/{job_id}", what=f"job {job_id}", allow_errors=(_INVALID_JOB_ID,))
        except SlurmRestError:
            return None
        for job in answer.get("jobs") or []:
            if isinstance(job, dict) and self._key(job)[0] in (job_id, str(job.get("job_id"))):
                return _text(job.get("standard_output")) or None
        return None

    def cancel(self, job_ids: Iterable[str], signal: str | None = None) -> None:
        """``DELETE job/{id}`` for each (unknown ids are not an error)."""
        ids = check_job_ids(job_ids)
        query = None
        if signal:
            if not re.match(r"^[A-Z0-9]+$", str(signal)):
                raise InvalidArgumentError("signal", signal, "a signal name or number such as 'TERM', 'USR1', '15'")
            query = {"signal": signal if signal.isdigit() else f"SIG{signal.removeprefix('SIG')}"}
        for job_id in ids:
            self.runner.request(
                "DELETE", f"job/{job_id}", query=query, what=f"job {job_id}", allow_errors=(_INVALID_JOB_ID,)
            )

    def partitions(self) -> dict[str, dict[str, Any]]:
        """Every partition: ``state`` (up/down...), ``default``, ``gpus`` (GPUs on its nodes), ``priority_tier``,
        ``preempt_mode``."""
        parts = self.runner.request("GET", "partitions", what="the partitions").get("partitions") or []
        nodes = self.runner.request("GET", "nodes", what="the nodes").get("nodes") or []
        gpus: dict[str, int] = {}
        for node in nodes:
            if isinstance(node, dict):
                for name in node.get("partitions") or []:
                    gpus[_text(name)] = gpus.get(_text(name), 0) + _node_gpus(node)
        out = {}
        for p in parts:
            if isinstance(p, dict) and p.get("name"):
                out[_text(p["name"])] = {
                    "state": _text(p.get("state")).lower(),
                    "default": "default" in (p.get("flags") or []),
                    "gpus": gpus.get(_text(p["name"]), 0),
                    "priority_tier": _count(
                        p.get("priority_tier"), f"GET partitions: {_text(p['name'])}", "priority_tier"
                    )
                    if p.get("priority_tier") is not None
                    else None,
                    "preempt_mode": ",".join(_text(m) for m in p.get("preemption_mode") or []).upper(),
                }
        return out

    def node_sizes(self) -> tuple[list[NodeSize], str | None]:
        """Every node's CPUs, memory and GPUs (the nodes endpoint), and the default partition."""
        nodes = self.runner.request("GET", "nodes", what="the nodes").get("nodes") or []
        sizes = [
            NodeSize(
                name=_text(node.get("name")),
                partitions=tuple(_text(p) for p in node.get("partitions") or []),
                cpus=_count(node.get("cpus"), f"GET nodes: node {_text(node.get('name'))!r}", "cpus"),
                memory_mb=_count(
                    node.get("real_memory"), f"GET nodes: node {_text(node.get('name'))!r}", "real_memory"
                ),
                gpus=_node_gpus(node),
            )
            for node in nodes
            if isinstance(node, dict) and node.get("name")
        ]
        default = next((name for name, p in self.partitions().items() if p["default"]), None)
        return sizes, default

    def partition_gpus(self, partition: str | None = None) -> int:
        parts = self.partitions()
        name = partition or next((n for n, p in parts.items() if p["default"]), None)
        if name not in parts:
            raise InvalidArgumentError("partition", partition, "a partition slurmrestd knows")
        return int(parts[name]["gpus"])

    def check_connection(self) -> str:
        """Reachable, the token accepted, the API version spoken: a line that says so, or an error naming the fix."""
        problem = self.runner.token_problem()
        if problem:
            raise SlurmRestError(f"GET {self.runner.url}/slurm/{self.runner.api_version}/ping", 0, problem)
        answer = self.runner.request("GET", "ping", what="the connection test")
        release = ((answer.get("meta") or {}).get("Slurm") or {}).get("release", "?")
        parts = self.partitions()
        return (
            f"slurmrestd {self.runner.url} (Slurm {release}, API {self.runner.api_version}) as {self.runner.user}: "
            + "; ".join(f"{n}{'*' if p['default'] else ''} {p['state']} {p['gpus']} GPUs" for n, p in parts.items())
        )
