# frozen_string_literal: true

# Sidekiq 6.4.1 with gitlab-sidekiq-fetcher 0.8.0's reliable fetch, under
# ackgap: the adapter protocol (docs/adapter-protocol.md) on the Ruby kit
# (adapters/kit/ruby/ackgap_kit.rb). Both libraries are Debian's
# (ruby-sidekiq, ruby-gitlab-sidekiq-fetcher); see README.md.
#
# The fetcher's identity (the name of a process's working list and of its
# heartbeat key) is per PROCESS: `hostname:pid:nonce`, memoized in a class
# variable. So each ackgap worker name is one Ruby process of its own, a
# child this process forks (once it has loaded Sidekiq) and talks to over a
# pipe (one JSON line each way). The child is a Sidekiq process in miniature: its
# own connection pool (to the worker's URL), the fetcher's heartbeat thread,
# a ReliableFetch, and the units of work it fetched. `crash` is SIGKILL of
# that child: no shutdown path, its heartbeat stops; the worker's next
# request spawns a fresh child (a new identity).
#
# This (parent) process keeps only what Sidekiq has no notion of: the
# per-job delivery numbers handed out as tokens, and which child holds which
# delivery.
#
# The clock (README.md, Time): the hello says logical_time and
# follows_clock. The kit freezes this process's clock at each request's
# clock_ms and makes the answers' instants logical; every message to a child
# carries the clock_ms, and the child freezes its own clock there (Timecop,
# through the same AckgapKit.clock) before it runs the message, since the
# library runs in the child. On that clock the child's heartbeat is driven by
# its worker's granted leases (Child.heartbeat_due), not by a free-running
# thread.

require "ackgap_kit"
require "json"
require "zlib"

# --- the child: one Sidekiq process per worker name ---------------------------

module Child
  QUEUE = "default"
  # Keys of the adapter's own (Sidekiq has no record of them), written after
  # the library's call and never consulted before one: every id pushed (so
  # that `read` tells an admitted job held nowhere, `vanished`, from one never
  # admitted), and every id whose acknowledge removed it (Sidekiq keeps
  # nothing of a finished job). Sidekiq OSS has no uniqueness: a second push
  # of a jid is a second job, so the hello says `dedup: false` and ackgap
  # never sends an id twice.
  IDS = "ackgap:ids"
  DONE = "ackgap:done"

  # Every place Sidekiq keeps a job, read in one script (one instant). The
  # working lists are found with KEYS inside the script, so a list created
  # meanwhile cannot be missed.
  READ_LUA = <<~LUA
    local p = ARGV[1]
    local working = {}
    for _, k in ipairs(redis.call('KEYS', p .. 'working:queue:*')) do
      for _, j in ipairs(redis.call('LRANGE', k, 0, -1)) do table.insert(working, j) end
    end
    return {
      redis.call('SMEMBERS', p .. ARGV[2]),
      redis.call('SMEMBERS', p .. ARGV[3]),
      working,
      redis.call('LRANGE', p .. 'queue:' .. ARGV[4], 0, -1),
      redis.call('ZRANGE', p .. 'schedule', 0, -1),
      redis.call('ZRANGE', p .. 'retry', 0, -1),
      redis.call('ZRANGE', p .. 'dead', 0, -1),
      redis.call('ZRANGE', p .. 'interrupted', 0, -1),
    }
  LUA
  # Script result index -> (place, protocol state). The first place a job
  # is found in, in this order, is its state.
  PLACES = [
    [2, "working", "active"],
    [3, "queue", "pending"],
    [4, "schedule", "pending"],
    [5, "retry", "pending"],
    [6, "dead", "dead"],
    [7, "interrupted", "dead"],
  ].freeze

  def self.env_f(name, default) = Float(ENV.fetch(name, default.to_s))

  def self.main
    # stdout is the pipe to the parent; anything else that prints (Sidekiq's
    # logger writes to $stdout) goes to stderr.
    out = $stdout.dup
    out.sync = true
    $stdout.reopen($stderr)
    # Loaded before the config comes: a spare child waits here, ready.
    load_libraries
    cfg = JSON.parse($stdin.gets || exit!(0))
    boot(cfg)
    begin
      # The clock of the request that made this worker's process: frozen
      # there before its first heartbeat, when the request carried one.
      follow(cfg["clock_ms"])
      Sidekiq.redis(&:ping)
      # The first heartbeat before any lease; then the heartbeat thread.
      heartbeat
    rescue AckgapKit::Failure => e
      out.puts(JSON.generate({ "error" => { "kind" => e.kind, "message" => "#{cfg["worker"]}: #{e.message}" } }))
      exit!(0)
    rescue StandardError => e
      out.puts(JSON.generate({ "error" => { "kind" => "unavailable",
                                            "message" => "#{cfg["worker"]}: not connected: #{e.class}: #{e.message}" } }))
      exit!(0)
    end
    start_heartbeat_thread
    out.puts(JSON.generate({ "ready" => Sidekiq::BaseReliableFetch.identity }))
    server = Server.new(cfg)
    while (line = $stdin.gets)
      req = JSON.parse(line)
      answer = begin
        { "ok" => server.handle(req) }
      rescue AckgapKit::Failure => e
        { "error" => { "kind" => e.kind, "message" => e.message } }
      rescue StandardError => e
        $stderr.puts("sidekiq-adapter #{cfg["worker"]} (#{Sidekiq::BaseReliableFetch.identity}): " \
                     "#{req["op"]}: #{e.class}: #{e.message}\n  #{(e.backtrace || []).first(12).join("\n  ")}")
        { "error" => { "kind" => "unknown", "message" => "#{e.class}: #{e.message}" } }
      end
      out.puts(JSON.generate(answer))
    end
    exit!(0)
  end

  def self.load_libraries
    require "sidekiq"
    require "sidekiq/api"
    require "sidekiq/scheduled"
    require "sidekiq/job_retry"
    require "sidekiq-reliable-fetch"
    require "redis/namespace"
  end

  def self.boot(cfg)
    # redis-rb 4.8 warns on every SADD that Sidekiq::Client sends.
    Redis.silence_deprecations = true
    level = ENV.fetch("ACKGAP_SIDEKIQ_LOG_LEVEL", "warn")
    Sidekiq.logger = Sidekiq::Logger.new($stderr)
    Sidekiq.logger.level = level
    timeout = env_f("ACKGAP_SIDEKIQ_NETWORK_TIMEOUT_S", 5)
    # One pool per process, as Sidekiq has: the request thread and the
    # heartbeat thread. redis-rb's silent resend is off (reconnect_attempts
    # 0): one protocol call is one attempt, a connection lost mid-call is
    # `unknown`.
    Sidekiq.redis = { url: cfg["url"], namespace: cfg["namespace"], size: 3, network_timeout: timeout,
                      pool_timeout: timeout, reconnect_attempts: 0 }

    # The fetcher's intervals are constants, not options: set as short as it
    # allows (its SET ... EX takes whole seconds).
    set_const(Sidekiq::BaseReliableFetch, :HEARTBEAT_INTERVAL, env_f("ACKGAP_SIDEKIQ_HEARTBEAT_INTERVAL_S", 0.5))
    set_const(Sidekiq::BaseReliableFetch, :HEARTBEAT_LIFESPAN,
              Integer(ENV.fetch("ACKGAP_SIDEKIQ_HEARTBEAT_LIFESPAN_S", "3")))
    # ReliableFetch sleeps this long when every queue is empty; a lease
    # answers null at once.
    set_const(Sidekiq::ReliableFetch, :RELIABLE_FETCH_IDLE_TIMEOUT, 0)

    Object.const_set(:AckgapJob, Class.new do
      include Sidekiq::Worker

      sidekiq_options queue: QUEUE
      class << self
        attr_accessor :retry_delay_s
      end
      # The retry delay of the next fail (whole seconds; Sidekiq falls back
      # to its default, 15 s + count**4, for anything below 1, and adds a
      # jitter of rand(10) * (count + 1) s to it either way).
      sidekiq_retry_in { |_count, _exception| AckgapJob.retry_delay_s || 1 }

      def perform(*)
        raise "ackgap drives this job by hand; it is never performed"
      end
    end)
  end

  # --- the heartbeat, on either clock ---
  #
  # On real time (no clock_ms) the fetcher's heartbeat runs as the library's
  # `start_heartbeat_thread` runs it: `heartbeat` (SET ... EX LIFESPAN), then
  # `sleep HEARTBEAT_INTERVAL`, forever. On the walk's clock (clock_ms) that
  # thread writes nothing: its real-time schedule between steps would make a
  # walk depend on how long the steps took (the key's expiry is the frozen
  # server clock's, so a SET that did or did not land between two ticks
  # decides whether this process looks dead). Instead the heartbeat is
  # driven by the worker's leases: the library's first heartbeat when the
  # process starts, then one right after each fetch that took a job, when
  # HEARTBEAT_INTERVAL of the walk's time has passed since the last one (the
  # library's interval). So the key expires exactly at the deadline_ms of
  # the worker's latest granted lease, which that answer reported (a PTTL
  # read after the heartbeat): no other request moves it unannounced.
  HB_LOCK = Mutex.new
  @following = false # the last request carried clock_ms
  @last_hb_ms = nil  # the walk's instant of the last heartbeat, while following

  def self.heartbeat
    Sidekiq::BaseReliableFetch.heartbeat
    @last_hb_ms = AckgapKit.clock.ms if @following
  end

  # The library's heartbeat loop, with one gate: nothing while following.
  def self.start_heartbeat_thread
    fetch = Sidekiq::BaseReliableFetch
    Thread.new do
      loop do
        HB_LOCK.synchronize { fetch.heartbeat unless @following }
        sleep fetch::HEARTBEAT_INTERVAL
      rescue StandardError => e
        Sidekiq.logger.error("Heartbeat thread error: #{e.message}")
        sleep fetch::HEARTBEAT_RETRY_DELAY
      end
    end
  end

  # This process's clock for the message about to run: frozen at `clock_ms`
  # (Timecop, AckgapKit.clock), or real time (nil).
  def self.follow(clock_ms)
    HB_LOCK.synchronize do
      AckgapKit.clock.set(clock_ms)
      @last_hb_ms = nil unless @following && clock_ms
      @following = !clock_ms.nil?
    end
  end

  def self.following? = @following

  # While following, after a fetch that took a job: the heartbeat this
  # worker's process owes by now (none when HEARTBEAT_INTERVAL of the walk's
  # time has not passed since its last).
  def self.heartbeat_due
    return unless @following

    interval_ms = (Sidekiq::BaseReliableFetch::HEARTBEAT_INTERVAL * 1000).ceil
    heartbeat if @last_hb_ms.nil? || AckgapKit.clock.ms - @last_hb_ms >= interval_ms
  end

  def self.set_const(mod, name, value)
    mod.send(:remove_const, name)
    mod.const_set(name, value)
  end

  # The retry logic of Sidekiq's Processor, observed: which way it went and
  # the delay it drew. Nothing of its behaviour is changed.
  def self.observed_retry_class
    @observed_retry_class ||= Class.new(Sidekiq::JobRetry) do
      attr_reader :dead, :ready_at_ms

      private

      def delay_for(worker, count, exception)
        delay = super
        # attempt_retry computes retry_at = Time.now + delay right after
        # this returns: this is a lower bound of the score it writes (on a
        # frozen clock, exactly it).
        @ready_at_ms = ((Time.now.to_r + delay) * 1000).floor
        delay
      end

      def retries_exhausted(worker, msg, exception)
        @dead = true
        super
      end
    end
  end

  class Failed < StandardError; end

  # One worker's requests, run in order on the child's main thread.
  class Server
    def initialize(cfg)
      @worker = cfg["worker"]
      @ns = cfg["namespace"]
      @fetcher = Sidekiq::ReliableFetch.new(
        queues: [QUEUE],
        # The cleanup of dead processes' working lists runs inside
        # retrieve_work when this fetcher takes the cleanup lock: try it on
        # every fetch, and let the lock (SET NX EX, whole seconds) expire
        # after 1 s.
        cleanup_interval: Integer(ENV.fetch("ACKGAP_SIDEKIQ_CLEANUP_INTERVAL_S", "1")),
        lease_interval: 0
      )
      @enq = Sidekiq::Scheduled::Enq.new
      @held = {}
      @handles = 0
    end

    def handle(req)
      Child.follow(req["clock_ms"])
      precheck
      case req["op"]
      when "enqueue" then enqueue(req)
      when "lease" then lease
      when "complete" then complete(req)
      when "fail" then fail_job(req)
      when "state" then { "state" => state_of(req["job"]) }
      when "read" then read
      when "clear" then clear
      else raise AckgapKit.unknown("child: unknown op #{req["op"].inspect}")
      end
    end

    # A PING before the operation: if it fails, nothing of the operation
    # was sent (`unavailable`); any error after it is `unknown`.
    def precheck
      Sidekiq.redis(&:ping)
    rescue StandardError => e
      raise AckgapKit.unavailable("#{@worker}: not connected: #{e.class}: #{e.message}")
    end

    def now_ms = AckgapKit::Clock.now_ms

    def enqueue(req)
      jid = req["job"]
      item = { "class" => AckgapJob, "args" => [req["payload"]], "jid" => jid, "queue" => QUEUE,
               "retry" => [req["max_attempts"], 1].max - 1 }
      item["at"] = (Time.now.to_r + Rational(req["delay_ms"], 1000)).to_f if req["delay_ms"].positive?
      pushed = Sidekiq::Client.push(item)
      raise AckgapKit.unknown("Sidekiq::Client.push returned #{pushed.inspect}, not the jid") unless pushed == jid

      # The record `read` needs, after the push (a failure here is unknown:
      # the job was pushed).
      Sidekiq.redis { |c| raw(c).sadd?("#{@ns}:#{IDS}", jid) }
      "enqueued"
    end

    def lease
      # What the scheduled poller does every few seconds in a Sidekiq
      # process: due jobs of the retry and schedule sets back to their queue.
      @enq.enqueue_jobs
      # The fetch: the cleanup of dead processes' working lists when this
      # fetcher takes the cleanup lock, then RPOPLPUSH into this process's
      # working list.
      uow = @fetcher.retrieve_work
      return nil if uow.nil?

      msg = Sidekiq.load_json(uow.job)
      @handles += 1
      @held[@handles] = uow
      # On the walk's clock, the heartbeat a process taking work owes (see
      # Child.heartbeat_due); on real time the heartbeat thread's.
      Child.heartbeat_due
      # The job stays in this process's working list until its heartbeat
      # key expires: no reaper can take it before the key's current TTL.
      before = now_ms
      ttl = Sidekiq.redis { |c| c.pttl(Sidekiq::BaseReliableFetch.heartbeat_key(Sidekiq::BaseReliableFetch.identity)) }
      args = msg["args"]
      { "job" => msg["jid"].to_s, "payload" => (args.is_a?(Array) ? args[0] : args).to_s,
        "deadline_ms" => before + [ttl.to_i, 0].max, "handle" => @handles }
    end

    def complete(req)
      uow = @held[req["handle"]]
      return { "held" => false, "state" => state_of(req["job"]) } if uow.nil?

      removed = uow.acknowledge
      @held.delete(req["handle"])
      return { "removed" => 0, "state" => state_of(req["job"]) } unless removed == 1

      Sidekiq.redis { |c| raw(c).sadd?("#{@ns}:#{DONE}", req["job"]) }
      { "removed" => 1 }
    end

    # What Sidekiq's Processor#process does when the job raises: the retry
    # handlers (local, inside global), then acknowledge once Handled.
    def fail_job(req)
      uow = @held[req["handle"]]
      return { "held" => false, "state" => state_of(req["job"]) } if uow.nil?

      AckgapJob.retry_delay_s = [(req["retry_delay_ms"] / 1000.0).ceil, 1].max
      # JobRetry's jitter is `rand(10) * (count + 1)` s: on the walk's clock
      # its draw is seeded by the job and the instant, so that a replay of
      # the walk draws the same (the distribution is the library's).
      Kernel.srand(Zlib.crc32("#{req["job"]}@#{req["clock_ms"]}")) if Child.following?
      retrier = Child.observed_retry_class.new
      worker = AckgapJob.new
      jobstr = uow.job
      queue = uow.queue_name
      begin
        retrier.global(jobstr, queue) do
          retrier.local(worker, jobstr, queue) { raise Failed, "failed by ackgap" }
        end
        raise AckgapKit.unknown("the retry handlers returned without Handled")
      rescue Sidekiq::JobRetry::Handled
        nil
      end
      removed = uow.acknowledge
      @held.delete(req["handle"])
      if removed != 1
        $stderr.puts("sidekiq-adapter #{@worker}: #{req["job"]}: the retry was written, " \
                     "but acknowledge removed #{removed} entries from the working list")
      end
      return { "outcome" => "dead", "removed" => removed } if retrier.dead
      return { "outcome" => "requeued", "ready_at_ms" => retrier.ready_at_ms, "removed" => removed } \
        unless req["retry_delay_ms"].zero?

      # No delay asked: JobRetry's least delay is 1 s (plus its jitter), so
      # the retry it wrote is put on the queue now with Sidekiq's own API
      # (SortedEntry#add_to_queue: the retry count kept, unlike #retry). The
      # job is ready no earlier than this clock read.
      ready = now_ms
      entry = Sidekiq::RetrySet.new.find_job(req["job"])
      # Not found: the scheduled enqueuer of some process moved it already.
      entry&.add_to_queue
      { "outcome" => "requeued", "ready_at_ms" => ready, "removed" => removed }
    end

    def raw(conn) = conn.respond_to?(:redis) ? conn.redis : conn

    def scan_all
      Sidekiq.redis do |c|
        r = raw(c)
        r.eval(READ_LUA, keys: [], argv: ["#{@ns}:", IDS, DONE, QUEUE])
      end
    end

    # { jid => [places] }, ids admitted, ids done.
    def places
      ids, done, *lists = scan_all
      where = Hash.new { |h, k| h[k] = [] }
      PLACES.each do |index, place, _state|
        lists[index - 2].each do |entry|
          jid = begin
            JSON.parse(entry)["jid"]
          rescue StandardError
            nil
          end
          where[jid.nil? ? "(unparsable #{place} entry)" : jid.to_s] << place
        end
      end
      [where, ids, done]
    end

    def state_for(places_of, done)
      PLACES.each do |_index, place, state|
        return state if places_of.include?(place)
      end
      done ? "done" : "vanished"
    end

    def state_of(jid)
      where, _ids, done = places
      s = state_for(where.fetch(jid, []), done.include?(jid))
      return s unless s == "vanished"

      # A fenced answer's state must be one of the four; a job held nowhere
      # is not finished.
      $stderr.puts("sidekiq-adapter #{@worker}: #{jid}: held nowhere (vanished); a fenced answer says pending")
      "pending"
    end

    def read
      where, ids, done = places
      jobs = {}
      problems = []
      (ids | where.keys | done.to_a).sort.each do |jid|
        at = where.fetch(jid, [])
        jobs[jid] = state_for(at, done.include?(jid))
        all = at + (done.include?(jid) ? ["done"] : [])
        problems << "#{jid}: in several places [#{all.join(", ")}]" if all.size > 1
        problems << "#{jid}: held by Sidekiq but never admitted" unless ids.include?(jid)
      end
      answer = { "jobs" => jobs, "problems" => problems }
      # The library's clock, as this process (where Sidekiq runs) reads it.
      answer["clock_ms"] = now_ms if Child.following?
      answer
    end

    def clear
      Sidekiq.redis do |c|
        r = raw(c)
        keys = r.scan_each(match: "#{@ns}:*", count: 1000).to_a
        keys.each_slice(500) { |slice| r.del(*slice) }
      end
      @held.clear
      nil
    end
  end
end

# --- the parent: the protocol, one child per worker name ----------------------

# One forked child process and its pipe.
class ChildProcess
  attr_reader :pid

  # Children are forked from this process once it has loaded Sidekiq (in
  # the background, so that the hello is answered at once): a fork costs
  # milliseconds where a fresh Ruby needs a second or more on a loaded
  # machine. This process never touches Redis, so a child starts with no
  # connection, no identity and no heartbeat of its parent's. Two spares are
  # forked ahead; each waits for its worker's config.
  SPARES = 2
  LOADER = Thread.new { Child.load_libraries }
  FORK_LOCK = Mutex.new
  PIPES = [] # the parent's ends of every child's pipes, closed in each new child
  @spares = Thread::Queue.new
  class << self
    def prestart
      Thread.new { SPARES.times { @spares.push(fork_one) } }
    end

    def take
      child = @spares.empty? ? fork_one : @spares.pop
      Thread.new { @spares.push(fork_one) }
      child
    end

    def fork_one
      LOADER.join
      FORK_LOCK.synchronize do
        req_r, to = IO.pipe
        from, ans_w = IO.pipe
        pid = fork do
          # Only the forking thread lives on here. Close what is not this
          # child's: the other children's pipes and ackgap's stdin/stdout.
          PIPES.each do |io|
            io.close
          rescue IOError
            nil
          end
          to.close
          from.close
          $stdin.reopen(req_r)
          $stdout.reopen(ans_w)
          req_r.close
          ans_w.close
          begin
            Child.main
          ensure
            exit!(1)
          end
        end
        Process.detach(pid)
        req_r.close
        ans_w.close
        to.sync = true
        PIPES.push(to, from)
        [pid, to, from]
      end
    end

    def forget(*ios)
      FORK_LOCK.synchronize { ios.each { |io| PIPES.delete(io) } }
    end
  end

  def initialize(worker, url, namespace, clock_ms)
    @pid, @to, @from = ChildProcess.take
    @alive = true
    @to.puts(JSON.generate({ "worker" => worker, "url" => url, "namespace" => namespace, "clock_ms" => clock_ms }))
    first = @from.gets
    if first.nil?
      kill
      raise AckgapKit.unavailable("#{worker}: the Sidekiq child exited before it connected")
    end
    hello = JSON.parse(first)
    return unless hello["error"]

    kill
    raise AckgapKit::Failure.new(hello["error"]["kind"], hello["error"]["message"])
  end

  def alive? = @alive

  # One request to the child and its answer's value.
  def call(msg)
    raise AckgapKit.unavailable("the worker's Sidekiq process is gone") unless @alive

    begin
      @to.puts(JSON.generate(msg))
    rescue Errno::EPIPE, IOError
      kill
      raise AckgapKit.unavailable("the worker's Sidekiq process is gone (nothing sent)")
    end
    line = @from.gets
    if line.nil?
      kill
      raise AckgapKit.unknown("the worker's Sidekiq process died during #{msg["op"]}")
    end
    ans = JSON.parse(line)
    raise AckgapKit::Failure.new(ans["error"]["kind"], ans["error"]["message"]) if ans.key?("error")

    ans["ok"]
  end

  # SIGKILL: no shutdown path, nothing put back; the heartbeat stops.
  def kill
    @alive = false
    begin
      Process.kill(:KILL, @pid)
    rescue Errno::ESRCH
      nil
    end
    [@to, @from].each do |io|
      io.close
    rescue IOError
      nil
    end
    ChildProcess.forget(@to, @from)
  end
end

# A worker name's session: its current child, started by the worker's first
# message (at that message's clock) and respawned when it died on its own (a
# crash is the kit's: it drops the session).
class Session
  attr_reader :child

  def initialize(worker, url, namespace)
    @worker = worker
    @url = url
    @namespace = namespace
    @child = nil
  end

  def call(msg)
    @child = ChildProcess.new(@worker, @url, @namespace, msg["clock_ms"]) if @child.nil? || !@child.alive?
    @child.call(msg)
  end

  def kill = @child&.kill
end

class SidekiqQueue < AckgapKit::Queue
  def name = "sidekiq"
  # The library reads Time.now (the kit freezes it at each clock_ms, here
  # and in the children) and the server's clock (ackgap freezes it).
  def logical_time = true
  def follows_clock = true
  def fences = false
  # Sidekiq OSS has no uniqueness (Enterprise has): a second push of a jid is
  # a second job.
  def dedup = false

  def initialize
    super
    @lock = Mutex.new
    reset
  end

  def reset
    @lock.synchronize do
      @admitted = {}
      @deliveries = Hash.new(0) # jid -> its latest delivery number (the token)
      @leases = {}              # [jid, token] -> [ChildProcess, handle]
      @settled = {}             # [jid, token] -> true once acknowledged
    end
  end

  def open(worker, url) = Session.new(worker, url, queue)

  def crash(session)
    session.kill
  end

  # One message to the worker's child, at the request's clock (clock_ms, or
  # nil: real time).
  def call(s, req, msg) = s.call(msg.merge("clock_ms" => req["clock_ms"]))

  def op_enqueue(s, req)
    @lock.synchronize { @admitted[req["job"]] = true }
    call(s, req, req.slice("op", "job", "payload", "max_attempts", "delay_ms"))
  end

  def op_lease(s, req)
    got = call(s, req, { "op" => "lease" })
    return nil if got.nil?

    jid = got["job"]
    token = @lock.synchronize do
      t = (@deliveries[jid] += 1)
      @leases[[jid, t]] = [s.child, got["handle"]]
      t
    end
    { "job" => jid, "token" => token, "deadline_ms" => got["deadline_ms"], "payload" => got["payload"] }
  end

  # The delivery `token` of `jid` as this worker's current process holds it,
  # or the answer when it holds none (nothing is sent to Sidekiq then).
  def held(s, req, jid, token, op)
    @lock.synchronize do
      return [nil, { "outcome" => "missing" }] unless @admitted[jid] || @deliveries[jid].positive?

      child, handle = @leases[[jid, token]]
      return [handle, nil] if child && child.equal?(s.child) && child.alive?

      # A complete retried after it settled (a fail has no such answer:
      # fenced, nothing changed).
      already = op == "complete" && @settled[[jid, token]] && @deliveries[jid] == token
      return [nil, { "outcome" => "already_settled" }] if already
    end
    [nil, fenced(s, jid, call(s, req, { "op" => "state", "job" => jid })["state"])]
  end

  def fenced(_s, jid, state)
    { "outcome" => "fenced", "current" => @lock.synchronize { @deliveries[jid] }, "state" => state }
  end

  def op_complete(s, req)
    jid = req["job"]
    token = req["token"]
    handle, answer = held(s, req, jid, token, "complete")
    return answer if handle.nil?

    got = call(s, req, { "op" => "complete", "job" => jid, "handle" => handle })
    return fenced(s, jid, got["state"]) if got["held"] == false
    return fenced(s, jid, got["state"]) unless got["removed"] == 1

    @lock.synchronize do
      @settled[[jid, token]] = true
      @leases.delete([jid, token])
    end
    { "outcome" => "settled" }
  end

  def op_fail(s, req)
    jid = req["job"]
    token = req["token"]
    handle, answer = held(s, req, jid, token, "fail")
    return answer if handle.nil?

    got = call(s, req, { "op" => "fail", "job" => jid, "handle" => handle, "retry_delay_ms" => req["retry_delay_ms"] })
    return fenced(s, jid, got["state"]) if got["held"] == false

    @lock.synchronize { @leases.delete([jid, token]) }
    return { "outcome" => "dead" } if got["outcome"] == "dead"

    { "outcome" => "requeued", "ready_at_ms" => got["ready_at_ms"] }
  end

  def op_read(s, req) = call(s, req, { "op" => "read" })

  def op_clear(s, req)
    call(s, req, { "op" => "clear" })
    reset
    nil
  end
end

ChildProcess.prestart
AckgapKit.serve(SidekiqQueue.new)
