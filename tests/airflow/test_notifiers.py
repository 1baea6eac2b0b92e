"""Notifiers through Airflow (dag.test()): a sweep's end report by e-mail to a real local SMTP server
(aiosmtpd) and to a real local HTTP server as a Slack-style webhook; a failed local GPU task's alert with its
output tail through a webhook connection."""

import json
import socket
import threading
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import REPO, load_dag_file, run_and_collect

pytestmark = pytest.mark.airflow


@pytest.fixture
def webhook():
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], json.loads(body)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()


@pytest.fixture
def smtp_server():
    from aiosmtpd.controller import Controller

    class Inbox:
        def __init__(self):
            self.messages = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
            return "250 OK"

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, inbox.messages
    controller.stop()


def test_a_sweep_mails_and_posts_its_end_report(airflow_db, tmp_path, monkeypatch, webhook, smtp_server):
    url, posted = webhook
    port, inbox = smtp_server
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(tmp_path / "sweeps"))
    monkeypatch.setenv("GPUSCHED_TEST_WEBHOOK", url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUSCHED_TEST_SMTP",
        json.dumps(
            {
                "conn_type": "smtp",
                "host": "127.0.0.1",
                "port": port,
                "extra": {"disable_ssl": True, "disable_tls": True},
            }
        ),
    )
    state, _, states = run_and_collect(load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_notify.py").sweep_dag)
    assert state == "success", states
    ((mail_from, to, content),) = inbox
    mail = message_from_bytes(content)
    assert mail_from == "gpusched@example.org" and to == ["lab@example.org"]
    assert mail["Subject"] == ("[gpusched] sweep notified finished with failures: 2 succeeded, 1 failed; best acc 0.99")
    body = "\n".join(p.get_payload(decode=True).decode() for p in mail.walk() if p.get_content_type() == "text/html")
    assert "<td>lr=0.01</td>" in body and "diverged at lr=0.3" in body and "epoch 1: loss nan" in body
    ((path, kind, doc),) = posted
    assert path == "/slack" and kind.startswith("application/json")
    assert (
        doc["text"].startswith("**[gpusched] sweep notified finished with failures") and "| 1 | 0.99 |" in doc["text"]
    )


def test_a_failed_gpu_task_alerts_with_its_output_tail(airflow_db, tmp_path, monkeypatch, webhook):
    url, posted = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUSCHED_TEST_HOOK", json.dumps({"conn_type": "http", "extra": {"url": f"{url}/alerts"}})
    )
    state, _, states = run_and_collect(
        load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_notify.py").failure_dag
    )
    assert state == "failed" and states["train"][0] == "failed"
    ((path, _, doc),) = posted
    report = doc["report"]
    assert path == "/alerts" and report["kind"] == "task" and report["task_id"] == "train"
    assert report["state"] == "failed" and "exit" in report["error"].lower()
    assert report["tail"].splitlines()[-2:] == ["step 1 ok", "CUDA error: an illegal memory access"]
    assert doc["subject"].startswith("[gpusched] t_notify_failure.train failed (run ")


@pytest.mark.slurm
def test_a_failed_slurm_job_alerts_with_the_tail_its_operator_recorded(airflow_db, slurm_cluster, monkeypatch, webhook):
    url, posted = webhook
    monkeypatch.setenv("GPUSCHED_TEST_WEBHOOK", url)
    state, _, states = run_and_collect(
        load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_notify.py").slurm_failure_dag
    )
    assert state == "failed" and states["job"][0] == "failed"
    ((path, _, doc),) = posted
    report = doc["report"]
    assert path == "/slurm" and report["kind"] == "task" and report["tail_source"].startswith("Slurm job ")
    assert "loading data" in report["tail"] and "RuntimeError: CUDA out of memory" in report["tail"]


def test_a_search_in_rounds_reports_each_round_and_the_end(airflow_db, tmp_path, monkeypatch, webhook):
    url, posted = webhook
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(tmp_path / "sweeps"))
    monkeypatch.setenv("GPUSCHED_TEST_WEBHOOK", url)
    state, _, states = run_and_collect(
        load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_notify.py").rounds_dag
    )
    assert state == "success", states
    docs = [doc for path, _, doc in posted if path == "/rounds"]
    assert [d["report"]["round"] for d in docs] == [0, 1, None]  # round 1, round 2, then the sweep's end
    first, second, end = (d["report"] for d in docs)
    assert first["subject"].startswith("[gpusched] sweep notified_rounds round 1 of 2: so far 3 succeeded; best acc ")
    assert second["counts"]["succeeded"] > first["counts"]["succeeded"]  # the counts so far grow round by round
    assert end["subject"].startswith("[gpusched] sweep notified_rounds finished: ")
    assert end["top"][0]["score"] >= second["top"][0]["score"] >= first["top"][0]["score"]


def test_notify_rounds_needs_a_search_in_rounds():
    import pendulum
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    with (
        pytest.raises(AirflowException, match="search 'grid' does not run in rounds"),
        DAG("t_rounds_refused", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")),
    ):
        sweep_task_group(SweepSpec(name="g", test_config=[{"a": [1]}], command=["true"]), notify_rounds=True)


@pytest.fixture
def trickling_webhook():
    """A webhook that answers one byte every 0.5 s for a minute (a per-read timeout never fires)."""
    import time

    stop = threading.Event()
    auth = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            auth.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "120")
            self.end_headers()
            for _ in range(120):
                if stop.wait(0.5):
                    return
                self.wfile.write(b".")
                self.wfile.flush()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", auth, time
    stop.set()
    server.shutdown()


def test_a_webhook_that_trickles_its_answer_is_cut_off_at_the_timeout(trickling_webhook):
    """Issue 30, item 7: the timeout bounds the whole exchange, not each read."""
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.notifications.notifiers import Message, WebhookNotifier

    address, auth, time = trickling_webhook
    notifier = WebhookNotifier(url=f"http://bot:pa%3Ass@{address}/hook", timeout=2)
    started = time.monotonic()
    with pytest.raises(GpuschedError, match=r"did not answer within 2s"):
        notifier.deliver(Message("s", "t", "m", "<p>h</p>"))
    assert time.monotonic() - started < 4
    assert auth == ["Basic Ym90OnBhOnNz"]  # user:password in the URL is sent as Basic auth ("bot:pa:ss")


@pytest.mark.parametrize(
    "url",
    [
        "https://user:TOKEN-SECRET-1@127.0.0.1:1/hooks/TOKEN-SECRET-2?key=TOKEN-SECRET-3",
        "https://TOKEN-SECRET-1@127.0.0.1:notaport/TOKEN-SECRET-2",
        "http://user:TOKEN-SECRET-1@TOKEN-SECRET-2.invalid/x",
    ],
)
def test_no_part_of_a_webhook_url_reaches_an_error_message(url):
    """Issue 30, item 8: a webhook URL is a secret; whatever goes wrong, the error does not repeat it."""
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.notifications.notifiers import Message, WebhookNotifier

    with pytest.raises(GpuschedError) as caught:
        WebhookNotifier(url=url, timeout=5).deliver(Message("s", "t", "m", "<p>h</p>"))
    text = str(caught.value) + repr(caught.value.__cause__) + repr(caught.value.__context__)
    assert "TOKEN-SECRET" not in text and "not reachable" in text, text


def test_a_wechat_message_in_chinese_is_cut_to_wechats_4096_bytes_not_characters(webhook):
    """WeChat counts bytes: 4,000 Chinese characters are 12,000 bytes and it refuses them; the cut keeps whole
    characters and says it cut."""
    from airflow_provider_gpusched.notifications.notifiers import Message, WebhookNotifier

    url, received = webhook
    text = "训练完成：准确率 0.97。" * 400  # 5,600 characters, about 14,800 bytes
    WebhookNotifier(url=url, style="wechat").deliver(Message("扫描结束", text, text, text))
    ((_, content_type, body),) = received
    content = body["markdown"]["content"]
    assert body["msgtype"] == "markdown" and content_type.startswith("application/json")
    assert 4090 <= len(content.encode()) <= 4096 and content.endswith("\n…")
    assert text.startswith(content[:-2])  # whole characters, in order: nothing garbled
    short = "短消息"
    WebhookNotifier(url=url, style="wechat").deliver(Message("s", short, short, short))
    assert received[-1][2]["markdown"]["content"] == short
