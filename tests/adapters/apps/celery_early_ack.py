"""A user's Celery app as many are configured: Celery's default early ack
(task_acks_late=False, the message acked when the task starts). ackgap's
tests run it with `--app celery_early_ack:app` (tests/integration/apps.rs)."""

from celery import Celery

app = Celery("myproj", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")
app.conf.update(
    task_acks_late=False,
    broker_transport_options={"visibility_timeout": 60},
)
