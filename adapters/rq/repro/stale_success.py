"""RQ 2.12.0 alone (no ackgap): a job's success handled by a worker that no
longer holds its Execution leaves the StartedJobRegistry entry behind, and
StartedJobRegistry.cleanup() later requeues the finished job. Three runs:
the success without the Execution (what the ackgap adapter sends after a
crash), with it (what RQ's own worker holds), and with it but after the
lease expired and cleanup ran (a worker stalled past its heartbeat TTL).
Usage: python stale_success.py PORT"""
import sys, time
from redis import Redis
from rq import Queue, Retry, SimpleWorker
from rq.job import JobStatus

class Worker(SimpleWorker):
    def get_heartbeat_ttl(self, job):      # RQ's hook: a 1 s lease
        return 1

r = Redis(port=int(sys.argv[1]))
def success(w, job, q):
    w.handle_execution_ended(job, q, job.success_callback_timeout)
    job._status = JobStatus.FINISHED
    w.handle_job_success(job=job, queue=q, started_job_registry=q.started_job_registry)

for keep_execution, late in ((False, False), (True, False), (True, True)):
    r.flushall()
    q = Queue("q", connection=r)
    q.enqueue_call("os.getcwd", job_id="job", retry=Retry(max=1))
    w = Worker([q], connection=r)
    job, _ = Queue.dequeue_any([q], None, connection=r)   # the worker's lease
    execution = w.prepare_execution(job)
    w.prepare_job_execution(job, True)
    w.execution = execution if keep_execution else None   # the crash forgot it
    run = f"keep_execution={keep_execution} late={late}:"
    if not late:
        success(w, job, q)
        print(run, "after success: status", job.get_status(), "started", r.zrange("rq:wip:q", 0, -1))
    time.sleep(2.1)                                       # past the entry's score
    q.started_job_registry.cleanup()                      # RQ's maintenance
    if late:
        success(w, job, q)
    print(run, "at the end: status", job.get_status(), "queue", q.job_ids,
          "finished", q.finished_job_registry.get_job_ids())
