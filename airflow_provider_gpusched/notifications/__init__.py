"""Notifiers (Airflow's ``BaseNotifier``): a sweep's end-of-run report, and task-failure alerts with the job's
output tail, by e-mail (Airflow's SMTP provider) or a webhook (Slack, Teams, WeChat-robot or generic JSON)."""

from airflow_provider_gpusched.notifications.notifiers import EmailNotifier, GpuschedNotifier, WebhookNotifier

__all__ = ["EmailNotifier", "GpuschedNotifier", "WebhookNotifier"]
