"""RQ 2.12.0 alone (no ackgap): a worker stalled past its heartbeat TTL
(w0) handles its job's success, with its own Execution, after
StartedJobRegistry.cleanup() has requeued the job and a second worker (w1)
has taken it. RQ accepts it: the job is FINISHED (retries_left written back
from w0's copy) while w1 holds it. w1 then dies; the next cleanup requeues
the finished job and it runs a second time. Time passes by real sleep.
Also runs on RQ 3.0.0 (handle_job_success takes the Execution there; its
cleanup skips a job that is not STARTED, so that last requeue is 2.x's).
Usage: python stale_success_while_held.py PORT"""
import sys, time
from redis import Redis
import rq
from rq import Queue, Retry, SimpleWorker
from rq.job import Job, JobStatus

class Worker(SimpleWorker):
    def get_heartbeat_ttl(self, job):      # RQ's hook: a 1 s lease
        return 1

r = Redis(port=int(sys.argv[1]))
r.flushall()
q = Queue("q", connection=r)
q.enqueue_call("os.getcwd", job_id="job", retry=Retry(max=1))
w0, w1, w2 = (Worker([q], connection=r, name=f"w{i}") for i in range(3))

def take(w):                               # as SimpleWorker does for one job
    job, _ = Queue.dequeue_any([q], None, connection=r)
    w.prepare_execution(job)
    w.prepare_job_execution(job, True)
    return job

def success(w, job):                       # as perform_job does on success
    w.handle_execution_ended(job, q, job.success_callback_timeout)
    job._status = JobStatus.FINISHED
    kw = {"execution": w.execution} if rq.__version__ >= "3" else {}   # 2.x: w.execution
    w.handle_job_success(job=job, queue=q, started_job_registry=q.started_job_registry, **kw)

def show(step):
    job = Job.fetch("job", connection=r)
    print(f"{step}: status {job.get_status()} retries_left {job.retries_left} queue {q.job_ids}"
          f" started {r.zrange('rq:wip:q', 0, -1)} finished {q.finished_job_registry.get_job_ids()}"
          f" successful results {sum(x.type == x.Type.SUCCESSFUL for x in job.results())}")

job0 = take(w0)
show(f"w0 takes it (execution {w0.execution.id})")
time.sleep(2.1)                            # w0 stalls past its entry's score
q.started_job_registry.cleanup()           # RQ's maintenance
show("cleanup")
job1 = take(w1)
show(f"w1 takes it (execution {w1.execution.id})")
success(w0, job0)                          # w0's late success, its own Execution
show("w0's late success")
time.sleep(2.1)                            # w1 dies: never settles
q.started_job_registry.cleanup()
show("w1 dead, cleanup")
if q.job_ids:                              # the finished job runs again
    success(w2, take(w2))
    show("w2 takes it and succeeds")
