# frozen_string_literal: true

# The ackgap adapter protocol's plumbing for Ruby adapters, written once: the
# Ruby twin of adapters/kit/python/ackgap_kit.py, with the same rules.
#
# An adapter built on this kit holds only its queue's calls: a subclass of
# `AckgapKit::Queue` with one method per operation it supports
# (`op_<name>(session, req)`). The kit owns everything else, the same way for
# every adapter (docs/adapter-protocol.md):
#
# - the `hello`: the protocol version is checked (`refused` otherwise), the
#   server URL and the queue's name are validated and handed to
#   `Queue#setup`, the capabilities are the subclass's `name`,
#   `logical_time`, `follows_clock`, `fences` and `dedup`;
# - **the clock** (docs/adapter-protocol.md, Time): an adapter whose library
#   reads the process's own clock (`Time.now`) says `logical_time = true`
#   and `follows_clock = true`. Then, for each request carrying `clock_ms`,
#   the kit freezes the process-wide clock at exactly that instant with
#   Timecop (`Timecop.freeze`, its default process-wide stack: Time.now,
#   Date.today, DateTime.now; not `Process.clock_gettime`, not `sleep`) in
#   the dispatching thread, before the request is handed to the worker's
#   thread, and goes back to real time (`Timecop.return`) on a request
#   without it; on a request carrying `now_ms` too it turns the answer's
#   `deadline_ms` and `ready_at_ms` (the library's absolute ms) into logical
#   ms, `value - (clock_ms - now_ms)` (0, "unknown", stays 0); and a `read`
#   answer gains `clock_ms`, the library's clock in ms while it ran (the
#   adapter's own `clock_ms` when it gives one, e.g. read in the process
#   where the library runs; else this process's `Time.now`). Timecop
#   (Debian's ruby-timecop) is required only when a `clock_ms` comes;
#   `AckgapKit.clock` is the same clock for an adapter's own child
#   processes (a forked child sets it from the clock_ms it is sent);
# - a second `hello` is `refused` ("hello was already answered") and changes
#   nothing; any request before the first `hello` is `refused`;
# - an `op` the adapter does not list is `unsupported`;
# - **one rule for errors**: a malformed request (a field missing or of the
#   wrong type, checked here before the adapter sees it) is `refused`, since
#   nothing was sent; a `Failure` raised by the adapter is its own kind; any
#   other exception is `unknown`, because the call may already have reached
#   the server (the adapter raises `AckgapKit.unavailable(...)` itself when
#   it knows that nothing was sent, e.g. a failed connect);
# - one thread per worker name: a worker's requests run one at a time and in
#   order, on that worker's own session (`Queue#open(worker, url)`, opened on
#   first use, with `connections[worker]` from the hello when given);
#   different workers run concurrently;
# - `crash`: the worker's session is dropped without any shutdown path
#   (`Queue#crash(session)`: kill the process, close sockets, stop
#   heartbeats, never put jobs back), and the worker's next request opens a
#   fresh session, as a restarted worker process would;
# - answers are written one whole line at a time under a lock, and flushed;
# - on EOF the process exits at once (`exit!`), without closing sessions
#   cleanly: a clean close of several of these libraries puts held jobs back,
#   and the run is over anyway.
#
# Only the standard library is used here, and Timecop when it is installed
# (loaded with the kit, see Clock.preload; a clock_ms without it is
# refused). An adapter's `run` puts this directory on the load path
# (`ruby -I adapters/kit/ruby ...`).

require "json"

module AckgapKit
  PROTOCOL = 1
  QUEUE_NAME = /\A[A-Za-z0-9_.-]{1,64}\z/
  REQUIRED_OPERATIONS = %w[enqueue lease complete read clear].freeze
  ALL_OPERATIONS = %w[enqueue lease complete fail extend reap read clear crash].freeze

  # Each operation's fields and their types, as the protocol states them. A
  # request lacking one, or carrying one of another type, is refused before
  # the adapter sees it. `now_ms` may be null (the server's clock).
  FIELDS = {
    "enqueue" => { "job" => String, "payload" => String, "max_attempts" => Integer, "delay_ms" => Integer },
    "lease" => { "lease_ms" => Integer },
    "complete" => { "job" => String, "token" => Integer },
    "fail" => { "job" => String, "token" => Integer, "retry_delay_ms" => Integer },
    "extend" => { "job" => String, "token" => Integer, "lease_ms" => Integer },
    "reap" => { "limit" => Integer },
    "read" => {},
    "clear" => {},
    "crash" => {},
  }.freeze
  TIMED = %w[enqueue lease fail extend reap].freeze
  # The instants an answer may carry (lease, extend: deadline_ms; fail:
  # ready_at_ms): the library's absolute ms, made logical by the kit when the
  # request carried both now_ms and clock_ms (the protocol's rule 2).
  INSTANTS = %w[deadline_ms ready_at_ms].freeze
  # How long a change of the clock waits for the requests in flight (which
  # run at the clock they were sent at) before it moves the clock anyway.
  CLOCK_WAIT_S = 10.0

  # An error answer of the protocol's kind `kind`.
  class Failure < StandardError
    attr_reader :kind

    def initialize(kind, message)
      super(message)
      @kind = kind
    end
  end

  def self.refused(message) = Failure.new("refused", message)
  def self.unavailable(message) = Failure.new("unavailable", message)
  def self.unknown(message) = Failure.new("unknown", message)

  def self.log(name, *args)
    $stderr.puts("#{name}-adapter: #{args.join(" ")}")
    $stderr.flush
  end

  # The process-wide clock: frozen by Timecop at a request's `clock_ms`, or
  # real. Timecop 0.9.6 keeps its stack in its singleton unless
  # `Timecop.thread_safe` is set (then per thread, which would leave the
  # worker threads on real time): the kit insists on the process-wide
  # default. Its stack is kept one deep (return, then freeze).
  class Clock
    attr_reader :ms

    def initialize
      @ms = nil
      @lock = Mutex.new
    end

    def self.timecop
      require "timecop" unless defined?(::Timecop)
      if Timecop.thread_safe
        raise AckgapKit.refused("Timecop.thread_safe is set: a freeze would hold in one thread only; " \
                                "the kit needs its process-wide default")
      end
      Timecop
    rescue LoadError => e
      raise AckgapKit.refused("this request carries clock_ms, and following a clock needs Ruby's timecop " \
                              "(apt-get install ruby-timecop), which cannot be loaded: #{e.message}")
    end

    # Loads Timecop now when it can be loaded, and says nothing when it
    # cannot (the first clock_ms then gets the refusal above). The kit calls
    # it as it is itself loaded, in the main thread, before an adapter has
    # started a thread or forked. A lazy `require` failed under CI load with
    # "cannot load such file -- timecop", Timecop installed, in two CI runs
    # (the sidekiq adapter, which loads Sidekiq in a thread while the main
    # thread answers; once before 93f4fd3 moved the require ahead of the
    # first fork, once after): loaded here, every later `require "timecop"`,
    # in this process or a forked child, finds it loaded and loads nothing.
    def self.preload
      require "timecop"
    rescue LoadError
      nil
    end

    # The instant `ms` (ms since the Unix epoch) as a Time, exactly:
    # `Time.now.to_r * 1000` reads back `ms`.
    def self.at(ms) = Time.at(Rational(ms, 1000))

    # Freezes the clock at `ms`, or goes back to real time when `ms` is nil.
    def set(ms)
      @lock.synchronize do
        return if ms == @ms

        if ms.nil?
          Timecop.return
        else
          tc = Clock.timecop
          tc.return
          tc.freeze(Clock.at(ms))
        end
        @ms = ms
      end
    end

    # This process's clock in ms since the epoch, as the library reads it.
    def self.now_ms = (Time.now.to_r * 1000).floor
  end

  Clock.preload
  @clock = Clock.new
  class << self
    attr_reader :clock
  end

  # The request's clock_ms when `queue` follows it, else nil.
  def self.clock_of(queue, req)
    c = req["clock_ms"]
    queue.follows_clock && c.is_a?(Integer) ? c : nil
  end

  # The answer of a request run at its clock_ms, as the protocol wants it:
  # with now_ms too, every instant logical; a read says the library's clock.
  def self.logical(queue, req, ok)
    clock = clock_of(queue, req)
    return ok if clock.nil? || !ok.is_a?(Hash)

    now = req["now_ms"]
    if now.is_a?(Integer)
      offset = clock - now
      INSTANTS.each do |key|
        value = ok[key]
        next unless value.is_a?(Integer) && value != 0

        if value - offset < 0
          raise AckgapKit.unknown("#{key} #{value} is before the walk's epoch (clock_ms #{clock} - now_ms #{now}): " \
                                  "the library did not read the clock the kit set")
        end
        ok = ok.merge(key => value - offset)
      end
    end
    ok = ok.merge("clock_ms" => Clock.now_ms) if req["op"] == "read" && !ok.key?("clock_ms")
    ok
  end

  # What an adapter implements. `name`, `logical_time`, `follows_clock`,
  # `fences` and `dedup` are the hello's answer (override them); each operation is a method
  # `op_<name>(session, req)` returning the `ok` value, or raising `Failure`.
  # `dedup` false: the queue has no duplicate-id refusal (a second enqueue of
  # an id is a second message) and ackgap never sends an id twice; never fake
  # it with a set of ids the adapter keeps.
  class Queue
    attr_reader :server, :queue, :connections

    def name = "unnamed"
    def logical_time = false
    # true when the library reads this process's clock (Time.now) and the kit
    # is to freeze it at each request's clock_ms. With logical_time true it
    # makes the adapter honour now_ms exactly when requests carry clock_ms
    # (the kit turns the answers' absolute times into logical ones); without
    # clock_ms it runs on real time and now_ms must be null.
    def follows_clock = false
    def fences = false
    def dedup = true
    # How long past a lease's end (ms) the library may take to recover a
    # delivery it lost track of, when longer than a reap; nil: none (see
    # the protocol document's capabilities.recovery_ms).
    def recovery_ms = nil

    # The operations this adapter implements: those it has a method for, and
    # `crash`, which the kit always honours (it drops the session; `crash`
    # below drops whatever else a dead process loses).
    def operations
      ALL_OPERATIONS.select { |op| op == "crash" || respond_to?("op_#{op}") }
    end

    # Called once, at hello, before any session is opened.
    def setup(server, queue, connections)
      @server = server
      @queue = queue
      @connections = connections
    end

    # A new session for `worker` on `url`: whatever the operations of that
    # worker need (a connection, a library's worker object, a process).
    def open(worker, url)
      raise NotImplementedError, "#{self.class} must implement open(worker, url)"
    end

    # The worker holding `session` died: drop its state without the
    # library's shutdown path (nothing may be put back). The default has
    # nothing to drop; override it when a session holds more than sockets
    # that a dead process would lose (a heartbeat thread, a child process).
    def crash(session); end
  end

  # One worker name: a thread running its requests in order.
  class Worker
    attr_reader :name

    def initialize(server, name)
      @server = server
      @name = name
      @session = nil
      @inbox = Thread::Queue.new
      @thread = Thread.new { loop_forever }
      @thread.name = "worker-#{name}" if @thread.respond_to?(:name=)
    end

    def put(req) = @inbox.push(req)

    def loop_forever
      loop do
        req = @inbox.pop
        begin
          @server.answer(req) { run(req) }
        ensure
          @server.finished
        end
      end
    end

    def run(req)
      q = @server.queue
      op = req["op"]
      if op == "crash"
        unless @session.nil?
          session = @session
          @session = nil
          q.crash(session)
        end
        return nil
      end
      if @session.nil?
        url = q.connections.fetch(@name, q.server)
        @session = q.open(@name, url)
      end
      AckgapKit.logical(q, req, q.public_send("op_#{op}", @session, req))
    end
  end

  # The protocol loop: stdin requests in, stdout answers out.
  class Server
    attr_reader :queue

    def initialize(queue)
      @queue = queue
      @out_lock = Mutex.new
      @workers = {}
      @greeted = false
      # Requests handed to a worker thread and not answered yet.
      @in_flight = 0
      @idle_lock = Mutex.new
      @idle = ConditionVariable.new
    end

    def finished
      @idle_lock.synchronize do
        @in_flight -= 1
        @idle.broadcast
      end
    end

    # Sets the process's clock for the request about to be handed over:
    # frozen at `ms`, or real (nil). A change waits first for the requests
    # in flight to be answered (they run at the clock they were sent at), at
    # most CLOCK_WAIT_S.
    def set_clock(ms)
      return if ms == AckgapKit.clock.ms

      @idle_lock.synchronize do
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + CLOCK_WAIT_S
        while @in_flight.positive?
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          if left <= 0
            AckgapKit.log(@queue.name, "clock moved to #{ms.inspect} with #{@in_flight} request(s) still in " \
                                       "flight after #{CLOCK_WAIT_S} s")
            break
          end
          @idle.wait(@idle_lock, left)
        end
        AckgapKit.clock.set(ms)
      end
    end

    def send_answer(answer)
      line = JSON.generate(answer) + "\n"
      @out_lock.synchronize do
        $stdout.write(line)
        $stdout.flush
      end
    end

    # Runs the block and answers `req` with its value, or with the error the
    # one rule names: a Failure is its own kind, anything else `unknown`.
    def answer(req)
      rid = req["id"]
      begin
        ok = yield
        send_answer({ "in_reply_to" => rid, "ok" => ok })
      rescue Failure => e
        send_answer({ "in_reply_to" => rid, "error" => { "kind" => e.kind, "message" => e.message } })
      rescue Exception => e # rubocop:disable Lint/RescueException - the one rule: after sending, unknown
        raise if e.is_a?(SystemExit) || e.is_a?(Interrupt)

        AckgapKit.log(@queue.name, "request #{rid} (#{req["op"]}): #{e.class}: #{e.message}\n  " +
                                   (e.backtrace || []).first(20).join("\n  "))
        send_answer({ "in_reply_to" => rid, "error" => { "kind" => "unknown", "message" => "#{e.class}: #{e.message}" } })
      end
    end

    def hello(req)
      raise AckgapKit.refused("hello was already answered; send it once") if @greeted

      protocol = req["protocol"]
      unless protocol == PROTOCOL
        raise AckgapKit.refused("protocol #{protocol.inspect} not supported; this adapter speaks #{PROTOCOL}")
      end

      server = req["server"]
      queue = req["queue"]
      raise AckgapKit.refused("hello: `server` must be a URL string") unless server.is_a?(String) && !server.empty?
      unless queue.is_a?(String) && QUEUE_NAME.match?(queue)
        raise AckgapKit.refused("hello: `queue` must match [A-Za-z0-9_.-]{1,64}, got #{queue.inspect}")
      end

      connections = req["connections"] || {}
      unless connections.is_a?(Hash) && connections.values.all? { |v| v.is_a?(String) }
        raise AckgapKit.refused("hello: `connections` must map worker names to URL strings")
      end

      @queue.setup(server, queue, connections)
      @greeted = true
      {
        "name" => @queue.name,
        "capabilities" => {
          "operations" => @queue.operations,
          "logical_time" => @queue.logical_time ? true : false,
          "follows_clock" => @queue.follows_clock ? true : false,
          "fences" => @queue.fences ? true : false,
          "dedup" => @queue.dedup ? true : false,
        }.merge(@queue.recovery_ms ? { "recovery_ms" => Integer(@queue.recovery_ms) } : {}),
      }
    end

    # Why `req` cannot be run as it is, or nil.
    def malformed(req)
      op = req["op"]
      return "a request needs an integer `id`" unless req["id"].is_a?(Integer)
      return nil unless FIELDS.key?(op) && @queue.operations.include?(op) # unsupported, answered below
      return "#{op}: `worker` must be a string" unless req["worker"].is_a?(String)

      FIELDS[op].each do |field, kind|
        value = req[field]
        unless value.is_a?(kind)
          return "#{op}: `#{field}` must be #{kind == Integer ? "an integer" : "a string"}, got #{value.inspect}"
        end
        return "#{op}: `#{field}` must not be negative, got #{value}" if kind == Integer && value.negative?
      end
      if TIMED.include?(op)
        now = req["now_ms"]
        unless now.nil? || (now.is_a?(Integer) && !now.negative?)
          return "#{op}: `now_ms` must be null or a non-negative integer, got #{now.inspect}"
        end
      end
      if @queue.follows_clock
        clock = req["clock_ms"]
        unless clock.nil? || (clock.is_a?(Integer) && !clock.negative?)
          return "#{op}: `clock_ms` must be null or a non-negative integer, got #{clock.inspect}"
        end
        if TIMED.include?(op) && !req["now_ms"].nil? && clock.nil?
          return "#{op}: a logical now_ms needs clock_ms: this adapter's library reads its own clock, " \
                 "which only a clock_ms sets (without it, now_ms must be null)"
        end
      end
      nil
    end

    def dispatch(req)
      op = req["op"]
      if op == "hello"
        answer(req) { hello(req) }
        return
      end
      unless @greeted
        send_answer({ "in_reply_to" => req["id"],
                      "error" => { "kind" => "refused", "message" => "hello must come first" } })
        return
      end
      why = malformed(req)
      unless why.nil?
        send_answer({ "in_reply_to" => req["id"], "error" => { "kind" => "refused", "message" => why } })
        return
      end
      unless @queue.operations.include?(op)
        send_answer({ "in_reply_to" => req["id"],
                      "error" => { "kind" => "unsupported",
                                   "message" => "op #{op.inspect} is not one of #{@queue.operations}" } })
        return
      end
      if @queue.follows_clock
        begin
          set_clock(AckgapKit.clock_of(@queue, req))
        rescue Failure => e
          AckgapKit.log(@queue.name, e.message)
          send_answer({ "in_reply_to" => req["id"], "error" => { "kind" => e.kind, "message" => e.message } })
          return
        end
      end
      name = req["worker"]
      worker = (@workers[name] ||= Worker.new(self, name))
      @idle_lock.synchronize { @in_flight += 1 }
      worker.put(req)
    end

    def serve
      $stdin.binmode
      $stdin.each_line do |raw|
        begin
          req = JSON.parse(raw.dup.force_encoding(Encoding::UTF_8))
        rescue JSON::ParserError, EncodingError
          AckgapKit.log(@queue.name, "not JSON, ignored: #{raw[0, 200].inspect}")
          next
        end
        unless req.is_a?(Hash)
          AckgapKit.log(@queue.name, "not an object, ignored: #{raw[0, 200].inspect}")
          next
        end
        dispatch(req)
      end
      # stdin closed: ackgap is done. Exit now, without a clean close of any
      # session (that would put held jobs back) and without waiting for calls
      # still in flight, whose answers nobody reads.
      @out_lock.synchronize { $stdout.flush }
      exit!(0)
    end
  end

  # Speaks the protocol on stdin and stdout for `queue` until EOF.
  def self.serve(queue)
    Server.new(queue).serve
  end
end
