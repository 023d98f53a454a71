"""The same user's Celery app with late acks (task_acks_late=True: the
message is acked after the task ran). ackgap's tests run it with
`--app celery_late_ack:app` (tests/integration/apps.rs)."""

from celery import Celery

app = Celery("myproj", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")
app.conf.update(
    task_acks_late=True,
    broker_transport_options={"visibility_timeout": 60},
)
