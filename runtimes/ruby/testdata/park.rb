# Parks Ruby threads in known stacks for rewind's tests. Each thread
# prints its own caller_locations(0), taken on the line it parks on, as
# "THREAD <native thread id>" then "label<TAB>path<TAB>line" a frame;
# the main thread prints "ready" once every other thread sleeps, and
# parks reading stdin (rb_a -> rb_b -> rb_c, as in issue 41).
$m = Mutex.new
$q = Thread::Queue.new
def report(locs) = $m.synchronize { puts "THREAD #{Thread.current.native_thread_id}", locs.map { |l| "#{l.label}\t#{l.path}\t#{l.lineno}" } ; $stdout.flush }
def rec(n) = n == 0 ? (report(caller_locations(0)); $q.pop) : rec(n - 1)
class Foo
  def self.cm = (report(caller_locations(0)); $q.pop)
  define_method(:dm) { (report(caller_locations(0)); $q.pop) }
end
pr = Proc.new { report(caller_locations(0)); $q.pop }
threads = [
  Thread.new { rec(4) },
  Thread.new { [1, 2].each { |x| report(caller_locations(0)); $q.pop } },
  Thread.new { Foo.new.dm },
  Thread.new { pr.call },
  Thread.new { Foo.cm },
]
(Integer(ARGV[0] || 0)).times { threads << Thread.new { rec(2) } }
Thread.pass until threads.all? { |t| t.status == "sleep" }
def rb_c = (report(caller_locations(0)); puts "ready"; $stdout.flush; $stdin.gets)
def rb_b = rb_c
def rb_a = rb_b
rb_a
