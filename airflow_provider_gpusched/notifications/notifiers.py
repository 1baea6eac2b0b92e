"""Notifiers for sweeps and GPU/Slurm tasks, as Airflow ``BaseNotifier`` subclasses.

What they say (:class:`GpuschedNotifier`):

* bound to a sweep (``sweep_task_group(spec, notify=[...])`` binds them, or ``sweep_folder=``): the sweep's
  end report (core/sweep/results/end_report.py) — counts, the leaderboard's top, the best trial, failures with the last
  lines of their output, GPU time by class;
* otherwise, in a task's ``on_failure_callback`` (or any callback): an alert about that task — DAG, run, task,
  map index, try, the error, and the last lines of its job's output (a Slurm job's, as its operator recorded
  it; a local GPU task's ``output.log``).

How they deliver it: :class:`EmailNotifier` (Airflow's SMTP provider, an ``smtp`` connection) and
:class:`WebhookNotifier` (a JSON POST: Slack's ``{"text"}``, Teams', WeChat Work robot's markdown, or a generic
document with the whole report).
"""

from __future__ import annotations

import copy
import html
import json
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook, BaseNotifier

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.http import HttpError, HttpTimeoutError, exchange
from airflow_provider_gpusched.core.text import cut_to_bytes, printable

#: lines of a failed task's output in an alert
ALERT_TAIL_LINES = 20


@dataclass
class Message:
    subject: str
    text: str
    markdown: str
    html: str
    payload: dict[str, Any] = field(default_factory=dict)  # the machine-readable document (generic webhook)


class GpuschedNotifier(BaseNotifier):
    """The message; subclasses deliver it (:meth:`deliver`)."""

    template_fields: Sequence[str] = ()

    def __init__(
        self,
        *,
        sweep_folder: str | None = None,
        top_n: int = 5,
        job_class: str = "normal",
        gpus_per_trial: int = 1,
        tail_lines: int = ALERT_TAIL_LINES,
    ) -> None:
        super().__init__()
        if not is_int(top_n) or top_n < 1:
            raise InvalidArgumentError("top_n", top_n, "a whole number >= 1")
        self.sweep_folder = sweep_folder
        self.top_n, self.job_class, self.gpus_per_trial, self.tail_lines = top_n, job_class, gpus_per_trial, tail_lines
        self.round_no: int | None = None
        self.rounds: int | None = None

    def for_sweep(
        self,
        folder: str,
        *,
        job_class: str = "normal",
        gpus_per_trial: int = 1,
        round_no: int | None = None,
        rounds: int | None = None,
    ) -> GpuschedNotifier:
        """A copy bound to the sweep in ``folder`` (what ``sweep_task_group(notify=...)`` attaches); with
        ``round_no``, to the end of that round of ``rounds`` (``notify_rounds=True``)."""
        bound = copy.copy(self)
        bound.sweep_folder, bound.job_class, bound.gpus_per_trial = folder, job_class, gpus_per_trial
        bound.round_no, bound.rounds = round_no, rounds
        return bound

    # -- the message -----------------------------------------------------------------------------------
    def message(self, context) -> Message:
        if self.sweep_folder:
            return self._sweep_message(context, self.sweep_folder)
        return self._task_message(context)

    def _sweep_message(self, context, folder: str) -> Message:
        from airflow_provider_gpusched.core.sweep.results.end_report import build_end_report

        run = getattr(context.get("dag_run"), "run_id", None) or context.get("run_id")
        report = build_end_report(
            folder,
            top_n=self.top_n,
            job_class=self.job_class,
            gpus_per_trial=self.gpus_per_trial,
            run=run,
            round_no=self.round_no,
            rounds=self.rounds,
        )
        return Message(
            report.subject, report.text(), report.markdown(), report.html(), {"kind": "sweep", **report.to_dict()}
        )

    def _task_message(self, context) -> Message:
        ti = context["ti"]
        where = f"{ti.dag_id}.{ti.task_id}" + (f"[{ti.map_index}]" if getattr(ti, "map_index", -1) >= 0 else "")
        state = "failed" if context.get("exception") is not None else str(getattr(ti, "state", "") or "ended")
        error = context.get("exception")
        tail, source = self._output_tail(ti)
        subject = f"[gpusched] {where} {state} (run {ti.run_id}, try {ti.try_number})"
        text = [subject, ""]
        if error is not None:
            text.append(f"error: {printable(str(error))[:2000]}")
        if tail:
            text += ["", f"last lines of {source}:", *tail.splitlines()]
        body = "\n".join(text) + "\n"
        markdown = (
            f"**{subject}**\n\n"
            + (f"error: `{printable(str(error))[:2000]}`\n" if error is not None else "")
            + (f"\nlast lines of `{source}`:\n```\n{tail.replace('```', chr(39) * 3)}\n```\n" if tail else "")
        )
        html_body = (
            f"<h3>{html.escape(subject)}</h3>"
            + (f"<p>error: {html.escape(str(error))}</p>" if error else "")
            + (
                f"<p>last lines of <code>{html.escape(source)}</code>:</p><pre>{html.escape(tail)}</pre>"
                if tail
                else ""
            )
        )
        return Message(
            subject,
            body,
            markdown,
            html_body,
            {
                "kind": "task",
                "subject": subject,
                "dag_id": ti.dag_id,
                "run_id": ti.run_id,
                "task_id": ti.task_id,
                "map_index": getattr(ti, "map_index", -1),
                "try_number": ti.try_number,
                "state": state,
                "error": None if error is None else str(error),
                "tail": tail,
                "tail_source": source,
            },
        )

    def _output_tail(self, ti) -> tuple[str, str]:
        """The task's job output: the tail a backend's operator recorded when the job ended (a Slurm job's:
        ``Backend.output_tail``), else the local GPU task's output.log (read only under the local run directory)."""
        from airflow_provider_gpusched.core.backends import backend_names, get_backend
        from airflow_provider_gpusched.core.safe_files import read_tail

        def recorded(key: str) -> Any:
            try:
                return ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=ti.map_index)
            except Exception:  # noqa: BLE001 - an alert goes out without the tail rather than not at all
                return None

        for name in backend_names():
            try:
                found = get_backend(name).output_tail(recorded, self.tail_lines)
            except Exception:  # noqa: BLE001 - a backend that cannot load leaves the tail to the others
                found = None
            if found:
                return found
        root = settings.local_run_dir()
        path = os.path.join(settings.task_directory(root, ti, f"try-{ti.try_number}"), "output.log")
        tail = read_tail(path, root, self.tail_lines)
        return (tail, path) if tail else ("", "")

    # -- delivery --------------------------------------------------------------------------------------
    def notify(self, context) -> None:
        self.deliver(self.message(context))

    def deliver(self, message: Message) -> None:
        raise NotImplementedError


class EmailNotifier(GpuschedNotifier):
    """E-mail through Airflow's SMTP provider (an ``smtp`` connection: host, port, login; ``from_email`` or
    the connection's). The body is HTML with the plain-text report alongside."""

    template_fields: Sequence[str] = ("to", "from_email", "subject_prefix")

    def __init__(
        self,
        *,
        to: str | Sequence[str],
        smtp_conn_id: str = "smtp_default",
        from_email: str | None = None,
        subject_prefix: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not to or (not isinstance(to, str) and not all(isinstance(t, str) and t for t in to)):
            raise InvalidArgumentError("to", to, "an e-mail address or a list of them")
        self.to, self.smtp_conn_id, self.from_email, self.subject_prefix = to, smtp_conn_id, from_email, subject_prefix

    def deliver(self, message: Message) -> None:
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook
        except ImportError:
            raise GpuschedError(
                "EmailNotifier needs Airflow's SMTP provider: pip install apache-airflow-providers-smtp"
            ) from None
        with SmtpHook(smtp_conn_id=self.smtp_conn_id) as hook:
            hook.send_email_smtp(
                to=self.to,
                subject=f"{self.subject_prefix}{message.subject}",
                html_content=message.html + f"<hr><pre>{html.escape(message.text)}</pre>",
                from_email=self.from_email,
            )


#: how each webhook style wraps the message
STYLES = ("generic", "slack", "teams", "wechat")
#: WeChat Work's limit on a markdown message's content: 4,096 bytes of UTF-8 (a Chinese character takes 3)
WECHAT_MARKDOWN_BYTES = 4096


class WebhookNotifier(GpuschedNotifier):
    """A JSON POST to a webhook. The URL is a secret: give it as a connection (``webhook_conn_id``: its host
    holds the whole URL, or its extra ``{"url": ...}``) rather than in the DAG file; ``url=`` works too.

    ``style``: ``slack`` (``{"text": markdown}``), ``teams`` (``{"text": markdown}``), ``wechat`` (WeChat Work
    robot: ``{"msgtype": "markdown", "markdown": {"content": ...}}``) or ``generic`` (``{"subject", "text",
    "markdown", "report"}``: the whole report as data)."""

    template_fields: Sequence[str] = ()

    def __init__(
        self,
        *,
        url: str | None = None,
        webhook_conn_id: str | None = None,
        style: str = "generic",
        timeout: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (url is None) == (webhook_conn_id is None):
            raise InvalidArgumentError("url", url, "exactly one of url or webhook_conn_id")
        if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise InvalidArgumentError("url", "<hidden>", "an http:// or https:// URL")
        if style not in STYLES:
            raise InvalidArgumentError("style", style, f"one of {list(STYLES)}")
        self.url, self.webhook_conn_id, self.style, self.timeout = url, webhook_conn_id, style, timeout

    def _url(self) -> str:
        if self.url:
            return self.url
        if self.webhook_conn_id is None:  # __init__ takes exactly one of the two
            raise InvalidArgumentError("webhook_conn_id", None, "a connection id when no url is given")
        conn = BaseHook.get_connection(self.webhook_conn_id)
        extra = conn.extra_dejson if isinstance(conn.extra_dejson, dict) else {}
        url = extra.get("url") or conn.host or ""
        if not url.startswith(("http://", "https://")):
            raise GpuschedError(
                f"connection {self.webhook_conn_id!r}: expected the webhook URL in its host or in "
                f'its extra as {{"url": "https://..."}}'
            )
        return url

    def body(self, message: Message) -> dict[str, Any]:
        if self.style in ("slack", "teams"):
            return {"text": message.markdown}
        if self.style == "wechat":
            return {
                "msgtype": "markdown",
                "markdown": {"content": cut_to_bytes(message.markdown, WECHAT_MARKDOWN_BYTES)},
            }
        return {
            "subject": message.subject,
            "text": message.text,
            "markdown": message.markdown,
            "report": message.payload,
        }

    def deliver(self, message: Message) -> None:
        """POST the message through one bounded exchange (core/http.py): connect, send and answer take at most
        ``timeout`` seconds together (a server that trickles its answer is cut off), the answer is read no further
        than 64 KiB (the rest left unread), a redirect is followed only within the webhook's own origin, and no error message holds any
        part of the URL (a secret)."""
        url = self._url()
        data = json.dumps(self.body(message), default=str).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "airflow-provider-gpusched"}
        try:
            answer = exchange(
                "POST", url, body=data, headers=headers, timeout=self.timeout, max_bytes=WEBHOOK_ANSWER, keep_first=True
            )
        except HttpTimeoutError:
            raise GpuschedError(f"webhook ({self.style}) did not answer within {self.timeout:g}s") from None
        except (HttpError, OSError) as exc:
            raise GpuschedError(
                f"webhook ({self.style}) not reachable: {type(exc).__name__}: {redact(str(exc), url)}"
            ) from None
        if answer.status >= 400:
            raise GpuschedError(f"webhook ({self.style}) answered HTTP {answer.status} {redact(answer.reason, url)}")


#: the most of a webhook's answer that is read (only its status matters)
WEBHOOK_ANSWER = 1 << 16


def redact(text: str, url: str) -> str:
    """``text`` without the URL or any of its parts that could be a secret (user, password, host, path, query)."""
    parts = urllib.parse.urlsplit(url)
    secrets = [
        url,
        parts.netloc,
        parts.path,
        parts.query,
        parts.username or "",
        parts.password or "",
        parts.hostname or "",
    ]
    for secret in sorted({x for x in secrets if len(x) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "<hidden>")
    return text[:500]
