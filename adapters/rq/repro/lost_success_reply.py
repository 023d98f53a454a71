"""RQ 2.12.0 alone (no ackgap): what RQ's own worker does when the reply to
its success transaction is lost (the server applied it; the connection
drops before the reply arrives), and what the ackgap adapter's sequence
(success, then failure, for one execution) does. Usage: python
lost_success_reply.py PORT"""
import sys
import redis
from rq import Queue, SimpleWorker

class LosesOneExecReply(redis.Connection):
    armed = True
    def send_packed_command(self, command, *a, **k):
        data = b"".join(command) if isinstance(command, list) else command
        self.watch = LosesOneExecReply.armed and b"EXEC" in data and b"rq:finished:q" in data
        return super().send_packed_command(command, *a, **k)
    def read_response(self, *a, **k):
        reply = super().read_response(*a, **k)
        if getattr(self, "watch", False) and isinstance(reply, list):
            LosesOneExecReply.armed = self.watch = False
            self.disconnect()                  # the reply is read and lost
            raise redis.ConnectionError("reply lost")
        return reply

pool = redis.ConnectionPool(port=int(sys.argv[1]), connection_class=LosesOneExecReply)
r = redis.Redis(connection_pool=pool)
r.flushall()
q = Queue("q", connection=r)
q.enqueue_call("os.getcwd", job_id="job")
w = SimpleWorker([q], connection=r)
job, _ = Queue.dequeue_any([q], None, connection=r)
w.prepare_execution(job)
print("perform_job returned", w.perform_job(job, q), "lost reply used:", not LosesOneExecReply.armed)
print("RQ's worker: status", job.get_status(), "finished", q.finished_job_registry.get_job_ids(),
      "failed", q.failed_job_registry.get_job_ids())

r.flushall()                                   # the adapter's sequence
q.enqueue_call("os.getcwd", job_id="job")
job, _ = Queue.dequeue_any([q], None, connection=r)
execution = w.prepare_execution(job)
w.prepare_job_execution(job, True)
w.handle_execution_ended(job, q, job.success_callback_timeout)
w.handle_job_success(job=job, queue=q, started_job_registry=q.started_job_registry)
w.execution = execution                        # the adapter's fail of the same lease
w.handle_job_failure(job=job, queue=q, started_job_registry=q.started_job_registry, exc_string="x")
print("success then failure: status", job.get_status(), "finished", q.finished_job_registry.get_job_ids(),
      "failed", q.failed_job_registry.get_job_ids())
