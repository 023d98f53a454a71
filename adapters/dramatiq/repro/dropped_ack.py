"""Dramatiq 2.2.1 alone (no ackgap): an ack whose request is dropped. The
consumer's ack raises; Dramatiq's own ConsumerThread.post_process_message
retries it until it lands, so the message does not stay in the acks set.
Usage: python dropped_ack.py PORT"""
import sys, time
from queue import PriorityQueue
import redis
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker
from dramatiq.worker import ConsumerThread

class DropsOneAck(redis.Connection):
    armed = False
    def send_packed_command(self, command, *a, **k):
        data = b"".join(command) if isinstance(command, list) else command
        if DropsOneAck.armed and b"ack" in data:
            DropsOneAck.armed = False
            self.disconnect()                      # the request never reaches the server
            raise redis.ConnectionError("request dropped")
        return super().send_packed_command(command, *a, **k)

pool = redis.ConnectionPool(port=int(sys.argv[1]), connection_class=DropsOneAck)
broker = RedisBroker(client=redis.Redis(connection_pool=pool), middleware=[], heartbeat_timeout=1000, maintenance_chance=0)
broker.client.flushall()
broker.declare_queue("jobs")
broker.enqueue(Message(queue_name="jobs", actor_name="job", args=(), kwargs={}, options={}))
consumer = broker.consume("jobs", prefetch=1, timeout=100)
message = next(consumer)
acks = f"dramatiq:__acks__.{broker.broker_id}.jobs"
DropsOneAck.armed = True
try:
    consumer.ack(message)                          # one attempt, as the ackgap adapter makes
except Exception as e:
    print("one ack:", type(e).__name__, e, "- acks set:", broker.client.scard(acks))
ct = ConsumerThread(broker=broker, queue_name="jobs", prefetch=1, work_queue=PriorityQueue(), worker_timeout=100)
ct.consumer = consumer
DropsOneAck.armed = True
t0 = time.time()
ct.post_process_message(message)                   # what Dramatiq's worker runs after the actor
print(f"post_process_message returned after {time.time() - t0:.0f} s; acks set:", broker.client.scard(acks),
      "message data left:", broker.client.hlen("dramatiq:jobs.msgs"))
