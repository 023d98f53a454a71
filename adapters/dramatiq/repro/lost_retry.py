"""Dramatiq 2.2.1 alone (no ackgap): an actor raises while the server cannot
be reached. The Retries middleware's enqueue of the retry raises a
ConnectionError, which Broker.emit_after logs ("Unexpected failure in
after_process_message") and swallows; WorkerThread.process_message then
post-processes the message, which is not failed, so its ack is retried
until the connection recovers and lands. The retry was never enqueued.
Usage: python lost_retry.py PORT"""
import logging, sys
from queue import PriorityQueue
import redis
import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Retries
from dramatiq.worker import ConsumerThread, WorkerThread

class DropsOneEnqueue(redis.Connection):
    armed = False
    def send_packed_command(self, command, *a, **k):
        data = b"".join(command) if isinstance(command, list) else command
        if DropsOneEnqueue.armed and b"enqueue" in data:
            DropsOneEnqueue.armed = False
            self.disconnect()                      # the request never reaches the server
            raise redis.ConnectionError("request dropped")
        return super().send_packed_command(command, *a, **k)

logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message).110s")
pool = redis.ConnectionPool(port=int(sys.argv[1]), connection_class=DropsOneEnqueue)
broker = RedisBroker(client=redis.Redis(connection_pool=pool), middleware=[Retries(min_backoff=100, max_backoff=100)],
                     heartbeat_timeout=1000, maintenance_chance=0)
broker.client.flushall()

@dramatiq.actor(broker=broker, queue_name="jobs", max_retries=3)
def job():
    raise RuntimeError("the handler failed")

job.send()
consumer = broker.consume("jobs", prefetch=1, timeout=100)
message = next(consumer)
ct = ConsumerThread(broker=broker, queue_name="jobs", prefetch=1, work_queue=PriorityQueue(), worker_timeout=100)
ct.consumer = consumer
work = PriorityQueue()
work.put((0, 0))                                   # process_message ends with work_queue.task_done()
wt = WorkerThread(broker=broker, consumers={"jobs": ct}, work_queue=work, worker_timeout=100)
DropsOneEnqueue.armed = True                       # the retry's enqueue meets the outage
wt.process_message(message)                        # what Dramatiq's worker runs for the message
c = broker.client
print("after process_message: failed", message.failed,
      "| queue", c.llen("dramatiq:jobs"), "delay queue", c.zcard("dramatiq:jobs.DQ"),
      "| acks set", c.scard(f"dramatiq:__acks__.{broker.broker_id}.jobs"),
      "| message data", c.hlen("dramatiq:jobs.msgs"), c.hlen("dramatiq:jobs.DQ.msgs"),
      "| dead letters", c.zcard("dramatiq:jobs.XQ"))
