"""RQ 2.12.0 alone (no ackgap): a job enqueued with Retry(max=1) runs three
times. A worker stalled past its heartbeat TTL (w0) handles its job's
failure, with its own Execution, after StartedJobRegistry.cleanup() has
collected that execution as abandoned and requeued the job, spending its
retry. handle_job_failure reads retries_left from w0's copy of the job,
read before the cleanup, so it retries the job again. Time passes by real
sleep. Also runs on RQ 3.0.0 (handle_job_failure takes the Execution there).
Usage: python stale_failure_retry.py PORT   (an empty throwaway server: it
is FLUSHALLed)"""
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
workers = [Worker([q], connection=r, name=f"w{i}") for i in range(4)]
runs = 0

def take(w):                               # as SimpleWorker does for one job
    global runs
    job, _ = Queue.dequeue_any([q], None, connection=r)
    w.prepare_execution(job)
    w.prepare_job_execution(job, True)
    runs += 1                              # the job's body would run here
    return job

def failure(w, job):                       # as perform_job does when the body raised
    job._status = JobStatus.FAILED
    w.handle_execution_ended(job, q, job.failure_callback_timeout)
    kw = {"execution": w.execution} if rq.__version__ >= "3" else {}   # 2.x: w.execution
    w.handle_job_failure(job=job, queue=q, started_job_registry=q.started_job_registry,
                         exc_string="RuntimeError: the job failed", **kw)

def show(step):
    job = Job.fetch("job", connection=r)
    print(f"{step}: runs {runs} status {job.get_status()} retries_left {job.retries_left} queue {q.job_ids}"
          f" started {r.zrange('rq:wip:q', 0, -1)} failed {q.failed_job_registry.get_job_ids()}")

print("rq", rq.__version__)
job0 = take(workers[0])
show("w0 takes it")
time.sleep(2.1)                            # w0 stalls past its entry's score
q.started_job_registry.cleanup()           # RQ's maintenance: AbandonedJobError, retry
show("cleanup")
failure(workers[0], job0)                  # w0's late failure, its own Execution
show("w0's late failure")
for w in workers[1:]:                      # other workers drain the queue; every run fails
    if not q.job_ids:
        break
    failure(w, take(w))
    show(f"{w.name} takes it and fails")
print("Retry(max=1): at most 2 runs; ran", runs)
