// idcontrol driver client, header-only C++17 (docs/driver.md, docs/protocol.md).
//
// The driver side of idcontrol's control channel, the same as the Python SDK (idcontrol/driver/loop.py):
// hello with the daemon's credential, one strictly increasing seq per state, the real-time period, the
// late-command rule (a command missing at its boundary: the last torque is reused for that period and the next
// state says last_late; 20 late in a row: the driver's own safe stop, joint damping, said with bridge_stopped
// until the daemon has left run mode and been started again), error replies handled as late commands, a
// restarted daemon's new credential read again after `unauthorized`, and statistics.
//
// Either form of docs/protocol.md's `state`: the full state (the base pose and twist in q, v), or the sensor form
// (State::has_imu: the IMU's reading and the joints alone) for a daemon that estimates the base
// (Welcome::sensors(), its welcome's state_form).
//
// Depends on libzmq, cppzmq and msgpack-cxx only. Nothing in the loop (Driver::run) allocates: buffers are sized
// when the session opens (Driver::hello), states are packed into a reserved buffer, commands are parsed with
// msgpack-cxx's visitor parser (one kept for the session) straight into preallocated arrays. (libzmq itself allocates message storage for
// messages over 33 bytes inside zmq_send / its I/O thread.)
//
// Use: derive from idcontrol::Driver, implement read_state() and apply(), then hello() and run().
#pragma once

#include <zmq.hpp>
#include <msgpack.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "idcontrol/driver.hpp sends float64 arrays as little-endian bytes: a big-endian port must swap them"
#endif

namespace idcontrol {

constexpr int kProtocolVersion = 1;

enum class Mode { idle, run, safe_stop, stopped };

inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::idle: return "idle";
    case Mode::run: return "run";
    case Mode::safe_stop: return "safe_stop";
    case Mode::stopped: return "stopped";
  }
  return "?";
}

// Thrown when the daemon refuses the session or sends something that is not the protocol.
struct ProtocolError : std::runtime_error {
  std::string code;
  ProtocolError(std::string c, const std::string& what) : std::runtime_error(what), code(std::move(c)) {}
};

// ------------------------------------------------------------------------------------------------ credential
namespace detail {

// SHA-256 (FIPS 180-4): the credential file is named by the hash of the control endpoint.
inline std::string sha256_hex(const std::string& text) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::vector<uint8_t> m(text.begin(), text.end());
  const uint64_t bits = static_cast<uint64_t>(m.size()) * 8;
  m.push_back(0x80);
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t block = 0; block < m.size(); block += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t(m[block + 4 * i]) << 24) | (uint32_t(m[block + 4 * i + 1]) << 16) |
             (uint32_t(m[block + 4 * i + 2]) << 8) | uint32_t(m[block + 4 * i + 3]);
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

}  // namespace detail

// The user's private runtime directory, where daemons keep their credentials and bind the channels their launch
// file does not name (docs/protocol.md, "Transport"): $IDCONTROL_RUNTIME_DIR, else $XDG_RUNTIME_DIR/idcontrol, else
// <tmp>/idcontrol-<uid>. The daemon makes and checks it (0700, the user's own); a client only reads from it.
inline std::string runtime_dir() {
  std::string dir = detail::env_or("IDCONTROL_RUNTIME_DIR", "");
  if (!dir.empty()) return dir;
  std::string xdg = detail::env_or("XDG_RUNTIME_DIR", "");
  if (!xdg.empty()) return xdg + "/idcontrol";
  std::string tmp = detail::env_or("TMPDIR", detail::env_or("TEMP", detail::env_or("TMP", "/tmp")));
  return tmp + "/idcontrol-" + std::to_string(static_cast<long>(getuid()));
}

// The private endpoint of `channel` ("control", "admin", "telemetry"): the ipc:// socket a daemon whose launch file
// names no [endpoints] binds in runtime_dir(), which only this user's processes can open.
inline std::string private_endpoint(const std::string& channel) { return "ipc://" + runtime_dir() + "/" + channel; }

// Where the daemon serving `control_endpoint` (as its launch file writes it) keeps its credential
// (docs/protocol.md, "Authorization").
inline std::string credential_path(const std::string& control_endpoint) {
  return runtime_dir() + "/" + detail::sha256_hex(control_endpoint).substr(0, 20) + ".token";
}

// The running daemon's credential; an empty string when it has made none (not running yet).
inline std::string read_credential(const std::string& control_endpoint) {
  std::ifstream file(credential_path(control_endpoint));
  std::string token;
  if (file) std::getline(file, token);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

// ------------------------------------------------------------------------------------------------ messages
struct Welcome {
  std::string robot;
  int nq = 0, nv = 0, nu = 0;
  std::vector<std::string> joint_names, contact_names, object_names;
  double dt = 0.0;
  std::string mode;
  std::string state_form = "full";  // what the daemon expects in state: "full" or "sensors" (it estimates the base)
  std::string estimator = "none";   // the daemon's base estimator: "inekf", "lkf", or "none" for the full form
  // Whether the daemon expects the sensor form: then send State::has_imu and the joints.
  bool sensors() const { return state_form == "sensors"; }
};

struct RobotSizes {
  std::string name;  // the daemon's robot file name, e.g. "quadruped"
  int nq = 0, nv = 0, nu = 0;
  std::vector<int> actuated_dofs;  // indices into v of the actuated joints (empty: the last nu entries)
};

// What an IMU reports, in the IMU frame of the robot file ([sensors] imu_frame, default the base link).
struct Imu {
  std::array<double, 4> orientation_xyzw{{0.0, 0.0, 0.0, 1.0}};  // world <- IMU, from the IMU's own filter
  std::array<double, 3> angular_velocity{};     // rad/s, the gyro, IMU axes
  std::array<double, 3> linear_acceleration{};  // m/s², the specific force, IMU axes (+9.81 up at rest)
  double t = NAN;  // s, bridge clock, when the IMU sampled (at most 5 ms before the state's t); NaN: not sent (t)
};

// The state read_state() fills; arrays are sized when the session opens. Conventions as docs/protocol.md:
// q = [x y z (m, world), qx qy qz qw (base -> world), joints], v = [base linear, angular velocity in the base
// frame, joints]; contact_forces (k x 3, world frame, N, welcome.contact_names order) when has_contact_forces.
// The sensor form (has_imu, a floating base, for a daemon whose welcome().sensors()): imu is sent and, of q and v,
// only the joints q[7:], v[6:]; the base part is not read. A failed sensor's arrays may hold NaN: the daemon then
// stops safely and says why. Each state must carry a new reading (the daemon takes 5 exact repeats of the gyro and
// accelerometer in a row for a frozen IMU).
struct State {
  double t = 0.0;
  std::vector<double> q, v, contact_forces;
  bool has_contact_forces = false;
  Imu imu;
  bool has_imu = false;
};

struct Stats {
  double p50 = NAN, p99 = NAN, max = NAN;
};

struct Report {
  uint64_t steps = 0, states_sent = 0, commands = 0, late_commands = 0, max_late_in_a_row = 0, safe_stops = 0;
  uint64_t errors = 0, hellos = 0, overruns = 0;
  Stats roundtrip_us, send_lateness_us;
  double on_deadline_fraction() const {
    const double due = double(commands + late_commands);
    return due > 0 ? double(commands) / due : NAN;
  }
  // One JSON object, the Python SDK's report (idcontrol launch reads it from a line {"bridge": ...}).
  std::string json() const {
    auto num = [](double x) { return std::isfinite(x) ? std::to_string(x) : std::string("null"); };
    auto stats = [&](const Stats& s) {
      return "{\"p50\": " + num(s.p50) + ", \"p99\": " + num(s.p99) + ", \"max\": " + num(s.max) + "}";
    };
    return "{\"steps\": " + std::to_string(steps) + ", \"states_sent\": " + std::to_string(states_sent) +
           ", \"commands\": " + std::to_string(commands) + ", \"late_commands\": " + std::to_string(late_commands) +
           ", \"max_late_in_a_row\": " + std::to_string(max_late_in_a_row) +
           ", \"safe_stops\": " + std::to_string(safe_stops) + ", \"errors\": " + std::to_string(errors) +
           ", \"hellos\": " + std::to_string(hellos) + ", \"overruns\": " + std::to_string(overruns) +
           ", \"roundtrip_us\": " + stats(roundtrip_us) + ", \"send_lateness_us\": " + stats(send_lateness_us) + "}";
  }
};

namespace detail {

inline bool is(const char* p, uint32_t n, const char* literal) {
  return std::strlen(literal) == n && std::memcmp(p, literal, n) == 0;
}

// A msgpack-cxx visitor that reads one control-channel reply (command, error or welcome) without allocating:
// only the top-level map's fields are looked at, and tau is copied into a preallocated array.
struct ReplyVisitor : msgpack::null_visitor {
  enum Type { unknown, command, error, welcome };
  enum Key { k_none, k_v, k_type, k_seq, k_t, k_tau, k_mode, k_code, k_message };
  double* tau = nullptr;
  int nu = 0;
  // results
  Type type = unknown;
  int64_t version = -1;
  uint64_t seq = 0;
  bool has_seq = false, has_t = false, tau_ok = false;
  double t = 0.0;
  Mode mode = Mode::idle;
  bool mode_ok = false;
  char code[32] = {0};
  char message[160] = {0};
  // parser position
  int depth = 0;
  bool in_key = false;
  Key key = k_none;

  void init() { reset(); }  // called by the parser before each message
  void reset() {
    type = unknown; version = -1; seq = 0; has_seq = has_t = tau_ok = mode_ok = false; t = 0.0;
    code[0] = message[0] = 0; depth = 0; in_key = false; key = k_none;
  }
  bool top_value() const { return depth == 1 && !in_key; }
  bool start_map(uint32_t) { ++depth; return true; }
  bool end_map() { --depth; return true; }
  bool start_array(uint32_t) { ++depth; return true; }
  bool end_array() { --depth; return true; }
  bool start_map_key() { in_key = depth == 1; return true; }
  bool end_map_key() { in_key = false; return true; }
  bool end_map_value() { if (depth == 1) key = k_none; return true; }
  bool visit_str(const char* p, uint32_t n) {
    if (depth == 1 && in_key) {
      key = is(p, n, "v") ? k_v : is(p, n, "type") ? k_type : is(p, n, "seq") ? k_seq : is(p, n, "t") ? k_t
          : is(p, n, "tau") ? k_tau : is(p, n, "mode") ? k_mode : is(p, n, "code") ? k_code
          : is(p, n, "message") ? k_message : k_none;
      return true;
    }
    if (!top_value()) return true;
    if (key == k_type) {
      type = is(p, n, "command") ? command : is(p, n, "error") ? error : is(p, n, "welcome") ? welcome : unknown;
    } else if (key == k_mode) {
      mode_ok = true;
      if (is(p, n, "idle")) mode = Mode::idle;
      else if (is(p, n, "run")) mode = Mode::run;
      else if (is(p, n, "safe_stop")) mode = Mode::safe_stop;
      else if (is(p, n, "stopped")) mode = Mode::stopped;
      else mode_ok = false;
    } else if (key == k_code || key == k_message) {
      char* out = key == k_code ? code : message;
      const size_t cap = key == k_code ? sizeof(code) : sizeof(message);
      const size_t len = std::min<size_t>(n, cap - 1);
      std::memcpy(out, p, len);
      out[len] = 0;
    }
    return true;
  }
  bool visit_positive_integer(uint64_t x) {
    if (!top_value()) return true;
    if (key == k_v) version = static_cast<int64_t>(x);
    else if (key == k_seq) { seq = x; has_seq = true; }
    else if (key == k_t) { t = double(x); has_t = true; }
    return true;
  }
  bool visit_float64(double x) {
    if (top_value() && key == k_t) { t = x; has_t = true; }
    return true;
  }
  bool visit_float32(float x) { return visit_float64(x); }
  bool visit_bin(const char* p, uint32_t n) {
    if (top_value() && key == k_tau && tau != nullptr && n == 8u * uint32_t(nu)) {
      std::memcpy(tau, p, n);
      tau_ok = true;
      for (int i = 0; i < nu; ++i) tau_ok = tau_ok && std::isfinite(tau[i]);
    }
    return true;
  }
  void parse_error(size_t, size_t) { type = unknown; }
  void insufficient_bytes(size_t, size_t) { type = unknown; }
};

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

inline void sleep_until(double t) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(t);
  ts.tv_nsec = static_cast<long>((t - double(ts.tv_sec)) * 1e9);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

inline Stats percentiles(std::vector<double>& samples, size_t n) {
  Stats s;
  if (n == 0) return s;
  std::sort(samples.begin(), samples.begin() + n);
  auto at = [&](double p) {  // linear interpolation, as numpy's default
    const double pos = p * double(n - 1);
    const size_t lo = size_t(pos);
    const size_t hi = std::min(lo + 1, n - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (pos - double(lo));
  };
  s.p50 = at(0.50);
  s.p99 = at(0.99);
  s.max = samples[n - 1];
  return s;
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------ the driver
class Driver {
 public:
  struct Options {
    // the daemon's control endpoint; by default the private one (ipc://RUNTIME/control, what a launch file without
    // [endpoints] binds): name the launch file's [endpoints] control when it names one
    std::string endpoint = private_endpoint("control");
    std::string credential_endpoint;  // names the credential file (default: endpoint)
    std::string token;                // the credential itself (default: read the file)
    bool realtime = true;             // "realtime" clock (false: "lockstep")
    double period = 0.0;              // s (0: the daemon's dt, from its welcome)
    int late_limit = 20;              // late commands in a row before the own safe stop
    double damping = 0.5;             // N·m·s/rad of the own safe stop
    double spin_us = 0.0;             // poll for the command without sleeping this long first
    size_t max_samples = 1 << 20;     // round trips kept for the statistics
  };

  Driver(RobotSizes robot, Options options)
      : robot_(std::move(robot)), options_(std::move(options)) {
    // A driver under SCHED_FIFO gets its ZeroMQ I/O thread one priority above it (set before the first socket
    // starts that thread): a driver that polls for its command must never keep the thread that delivers it
    // from running on the same CPU.
    int policy = 0;
    sched_param param{};
    if (pthread_getschedparam(pthread_self(), &policy, &param) == 0 && policy == SCHED_FIFO) {
      context_.set(zmq::ctxopt::thread_sched_policy, SCHED_FIFO);
      context_.set(zmq::ctxopt::thread_priority, std::min(param.sched_priority + 1, sched_get_priority_max(SCHED_FIFO)));
    }
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    if (options_.credential_endpoint.empty()) options_.credential_endpoint = options_.endpoint;
    credential_path_ = credential_path(options_.credential_endpoint);
    if (options_.late_limit < 1) throw std::invalid_argument("late_limit must be >= 1");
    if (robot_.actuated_dofs.empty())
      for (int i = robot_.nv - robot_.nu; i < robot_.nv; ++i) robot_.actuated_dofs.push_back(i);
    if (int(robot_.actuated_dofs.size()) != robot_.nu)
      throw std::invalid_argument("actuated_dofs must list nu indices into v");
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(options_.endpoint);
    tau_.assign(robot_.nu, 0.0);
    incoming_tau_.assign(robot_.nu, 0.0);
    safe_tau_.assign(robot_.nu, 0.0);
    zero_tau_.assign(robot_.nu, 0.0);
    state_.q.assign(robot_.nq, 0.0);
    state_.v.assign(robot_.nv, 0.0);
    floating_ = robot_.nq >= 7 && robot_.nq == robot_.nv + 1;
    rtt_.assign(options_.max_samples, 0.0);
    lateness_.assign(options_.max_samples, 0.0);
    in_.assign(1 << 16, 0);
    visitor_.tau = incoming_tau_.data();
    visitor_.nu = robot_.nu;
  }
  virtual ~Driver() = default;
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // What an integrator provides. read_state fills `state` (its arrays are sized already: q nq, v nv,
  // contact_forces 3k; in the sensor form also imu, with has_imu); apply drives the robot with tau (nu, N·m) for
  // the coming period (idle, stopped: zeros).
  virtual void read_state(State& state) = 0;
  virtual void apply(const double* tau, Mode mode) = 0;
  // The driver's own safe stop (late_limit late commands): joint damping, tau = -D qdot.
  virtual void safe_stop_torque(const State& state, double* tau) {
    for (int i = 0; i < robot_.nu; ++i) tau[i] = -options_.damping * state.v[robot_.actuated_dofs[i]];
  }
  // The clock run()'s duration counts, s (default: CLOCK_MONOTONIC; a simulator: its own time).
  virtual double clock_time() { return detail::now_s(); }

  // Open the session: show the credential, check robot and sizes; fills welcome(). Throws ProtocolError when
  // refused, std::runtime_error when no daemon answers within timeout_s. Buffers are sized here.
  const Welcome& hello(double timeout_s = 10.0) {
    const double deadline = detail::now_s() + timeout_s;
    while (detail::now_s() < deadline && !stop_) {
      if (!send_hello()) {
        usleep(100000);
        continue;
      }
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(500)) > 0) {
        zmq::message_t reply;
        if (!socket_.recv(reply)) continue;
        read_welcome(reply);
        return welcome_;
      }
    }
    throw std::runtime_error("no daemon answered at " + options_.endpoint);
  }

  // Serve until request_stop() or duration_s of clock_time() (0: no limit). Allocates nothing.
  const Report& run(double duration_s = 0.0) {
    if (welcome_.nu == 0) throw std::logic_error("call hello() before run()");
    const double t_end = duration_s > 0 ? clock_time() + duration_s : INFINITY;
    late_ = 0;
    if (options_.realtime) run_realtime(t_end); else run_lockstep(t_end);
    report_.roundtrip_us = detail::percentiles(rtt_, std::min(rtt_count_, rtt_.size()));
    report_.send_lateness_us = detail::percentiles(lateness_, std::min(lateness_count_, lateness_.size()));
    return report_;
  }

  void request_stop() { stop_ = true; }  // safe from a signal handler
  const Welcome& welcome() const { return welcome_; }
  const Report& report() const { return report_; }
  bool safe_stopped() const { return safe_stopped_; }
  Mode daemon_mode() const { return daemon_mode_; }
  double period() const { return options_.period; }

 private:
  // Read the daemon's credential into token_ (open/read into a fixed buffer: no allocation, so a restarted
  // daemon's new credential is read in the loop without allocating). False when there is none (not running).
  bool read_token() {
    if (!options_.token.empty()) {
      const size_t n = std::min(options_.token.size(), sizeof(token_) - 1);
      std::memcpy(token_, options_.token.data(), n);
      token_len_ = n;
      return true;
    }
    const int fd = ::open(credential_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const ssize_t n = ::read(fd, token_, sizeof(token_) - 1);
    ::close(fd);
    if (n <= 0) return false;
    size_t len = size_t(n);
    while (len > 0 && (token_[len - 1] == '\n' || token_[len - 1] == '\r' || token_[len - 1] == ' ')) --len;
    token_len_ = len;
    return len > 0;
  }

  void pack_str(msgpack::packer<msgpack::sbuffer>& pk, const char* text, size_t n) {
    pk.pack_str(uint32_t(n));
    pk.pack_str_body(text, uint32_t(n));
  }

  bool send_hello() {
    if (!read_token()) return false;  // no daemon yet
    out_.clear();
    msgpack::packer<msgpack::sbuffer> pk(out_);
    pk.pack_map(8);
    pack_key(pk, "v"); pk.pack_int(kProtocolVersion);
    pack_key(pk, "type"); pack_str(pk, "hello", 5);
    pack_key(pk, "robot"); pack_str(pk, robot_.name.data(), robot_.name.size());
    pack_key(pk, "nq"); pk.pack_int(robot_.nq);
    pack_key(pk, "nv"); pk.pack_int(robot_.nv);
    pack_key(pk, "nu"); pk.pack_int(robot_.nu);
    pack_key(pk, "clock");
    if (options_.realtime) pack_str(pk, "realtime", 8); else pack_str(pk, "lockstep", 8);
    pack_key(pk, "token"); pack_str(pk, token_, token_len_);
    socket_.send(zmq::const_buffer(out_.data(), out_.size()), zmq::send_flags::dontwait);
    return true;
  }

  void read_welcome(const zmq::message_t& reply) {
    msgpack::object_handle handle = msgpack::unpack(static_cast<const char*>(reply.data()), reply.size());
    const msgpack::object& o = handle.get();
    if (o.type != msgpack::type::MAP) throw ProtocolError("malformed", "the daemon's reply is not a map");
    std::string type, code, text;
    int version = -1;
    Welcome w;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) continue;
      const std::string key = kv.key.as<std::string>();
      if (key == "v") version = kv.val.as<int>();
      else if (key == "type") type = kv.val.as<std::string>();
      else if (key == "code") code = kv.val.as<std::string>();
      else if (key == "message") text = kv.val.as<std::string>();
      else if (key == "robot") w.robot = kv.val.as<std::string>();
      else if (key == "nq") w.nq = kv.val.as<int>();
      else if (key == "nv") w.nv = kv.val.as<int>();
      else if (key == "nu") w.nu = kv.val.as<int>();
      else if (key == "dt") w.dt = kv.val.as<double>();
      else if (key == "mode") w.mode = kv.val.as<std::string>();
      else if (key == "joint_names") w.joint_names = kv.val.as<std::vector<std::string>>();
      else if (key == "contact_names") w.contact_names = kv.val.as<std::vector<std::string>>();
      else if (key == "object_names") w.object_names = kv.val.as<std::vector<std::string>>();
      else if (key == "state_form" && kv.val.type == msgpack::type::STR) w.state_form = kv.val.as<std::string>();
      else if (key == "estimator" && kv.val.type == msgpack::type::STR) w.estimator = kv.val.as<std::string>();
    }
    if (version != kProtocolVersion)
      throw ProtocolError("bad_version", "the daemon speaks protocol version " + std::to_string(version));
    if (type == "error") throw ProtocolError(code, "daemon refused the driver (" + code + "): " + text);
    if (type != "welcome") throw ProtocolError("unknown_type", "expected welcome, got " + type);
    if (w.nq != robot_.nq || w.nv != robot_.nv || w.nu != robot_.nu)
      throw ProtocolError("robot_mismatch", "the daemon's sizes differ from the driver's");
    if (w.state_form != "full" && w.state_form != "sensors")
      throw ProtocolError("bad_field", "welcome's state_form is neither full nor sensors: " + w.state_form);
    if (w.sensors() && !floating_)
      throw ProtocolError("bad_field", "the daemon expects the sensor form, which only a floating base has");
    if (options_.period <= 0.0) {
      if (!(w.dt > 0.0 && w.dt < 10.0)) throw ProtocolError("bad_field", "welcome has no usable dt");
      options_.period = w.dt;
    }
    welcome_ = std::move(w);
    state_.contact_forces.assign(3 * welcome_.contact_names.size(), 0.0);
    report_.hellos += 1;
  }

  void pack_f64(msgpack::packer<msgpack::sbuffer>& pk, const char* key, const double* data, size_t n) {
    pk.pack_str(uint32_t(std::strlen(key)));
    pk.pack_str_body(key, uint32_t(std::strlen(key)));
    pk.pack_bin(uint32_t(8 * n));
    pk.pack_bin_body(reinterpret_cast<const char*>(data), uint32_t(8 * n));
  }
  // A float64, always (msgpack-cxx's pack_double writes an integral value as an integer; the protocol's floats
  // are float64).
  void pack_f64_value(double x) {
    uint64_t bits;
    std::memcpy(&bits, &x, 8);
    char buf[9];
    buf[0] = static_cast<char>(0xcb);
    for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
    out_.write(buf, 9);
  }
  void pack_key(msgpack::packer<msgpack::sbuffer>& pk, const char* key) {
    pk.pack_str(uint32_t(std::strlen(key)));
    pk.pack_str_body(key, uint32_t(std::strlen(key)));
  }

  double send_state() {
    read_state(state_);
    out_.clear();  // keeps its reserved memory
    msgpack::packer<msgpack::sbuffer> pk(out_);
    const bool forces = state_.has_contact_forces && !state_.contact_forces.empty();
    const bool rtt = has_last_rtt_ && late_ == 0;
    const bool imu = state_.has_imu && floating_;  // (a fixed base has no sensor form)
    uint32_t fields = 6 + (forces ? 1 : 0) + (rtt ? 1 : 0) + (safe_stopped_ ? 1 : 0) + (late_ > 0 ? 1 : 0);
    fields += imu ? 1 : 0;
    pk.pack_map(fields);
    pack_key(pk, "v"); pk.pack_int(kProtocolVersion);
    pack_key(pk, "type"); pk.pack_str(5); pk.pack_str_body("state", 5);
    pack_key(pk, "seq"); pk.pack_uint64(seq_);
    pack_key(pk, "t"); pack_f64_value(state_.t);
    const size_t base_q = imu ? 7 : 0, base_v = imu ? 6 : 0;  // the sensor form: the joints alone
    pack_f64(pk, "q", state_.q.data() + base_q, state_.q.size() - base_q);
    pack_f64(pk, "qd", state_.v.data() + base_v, state_.v.size() - base_v);
    if (imu) {
      const Imu& m = state_.imu;
      const bool imu_t = std::isfinite(m.t);
      pack_key(pk, "imu");
      pk.pack_map(imu_t ? 4 : 3);
      pack_f64(pk, "orientation_xyzw", m.orientation_xyzw.data(), 4);
      pack_f64(pk, "angular_velocity", m.angular_velocity.data(), 3);
      pack_f64(pk, "linear_acceleration", m.linear_acceleration.data(), 3);
      if (imu_t) { pack_key(pk, "t"); pack_f64_value(m.t); }
    }
    if (forces) pack_f64(pk, "contact_forces", state_.contact_forces.data(), state_.contact_forces.size());
    if (rtt) { pack_key(pk, "last_rtt_us"); pack_f64_value(last_rtt_us_); }
    if (safe_stopped_) { pack_key(pk, "bridge_stopped"); pk.pack_true(); }
    if (late_ > 0) { pack_key(pk, "last_late"); pk.pack_true(); }
    // The round trip starts just before the send: taken after it, a preemption between the two would hide
    // the daemon's work done meanwhile from the round trip.
    const double sent_at = detail::now_s();
    socket_.send(zmq::const_buffer(out_.data(), out_.size()), zmq::send_flags::dontwait);
    report_.states_sent += 1;
    return sent_at;
  }

  // Wait for the socket to have a message until `deadline` (CLOCK_MONOTONIC s), with µs resolution.
  bool wait_readable(double deadline) {
    const double spin_end = std::min(deadline, detail::now_s() + 1e-6 * options_.spin_us);
    while (detail::now_s() < spin_end)
      if (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) return true;
    const int fd = socket_.get(zmq::sockopt::fd);
    while (true) {
      if (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) return true;  // edge-triggered FD: ask first
      const double remaining = deadline - detail::now_s();
      if (remaining <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      timespec ts{static_cast<time_t>(remaining), static_cast<long>((remaining - double(time_t(remaining))) * 1e9)};
      ppoll(&p, 1, &ts, nullptr);
    }
  }

  // The command answering the last state (true, in incoming_tau_ / visitor_), or false when none came by the
  // deadline or an error came in its place.
  bool receive(double deadline, double sent_at) {
    while (true) {
      if (!wait_readable(deadline)) return false;
      auto got = socket_.recv(zmq::mutable_buffer(in_.data(), in_.size()), zmq::recv_flags::dontwait);
      if (!got || got->truncated()) continue;  // nothing, or too large to be a reply of ours
      parser_.init();  // the parser's stack keeps its memory: parsing allocates nothing after the first message
      size_t offset = 0;
      const auto parsed = parser_.execute(in_.data(), got->size, offset);
      if (parsed != msgpack::PARSE_SUCCESS || visitor_.version != kProtocolVersion) { report_.errors += 1; continue; }
      if (visitor_.type == detail::ReplyVisitor::error) {
        report_.errors += 1;
        if (std::strcmp(visitor_.code, "unauthorized") == 0) send_hello_in_loop();
        if (visitor_.has_seq && visitor_.seq == seq_) return false;
        continue;
      }
      if (visitor_.type == detail::ReplyVisitor::welcome) { report_.hellos += 1; continue; }
      if (visitor_.type != detail::ReplyVisitor::command || !visitor_.has_seq || visitor_.seq != seq_) continue;
      if (!visitor_.tau_ok || !visitor_.mode_ok) { report_.errors += 1; continue; }
      const double rtt_us = (detail::now_s() - sent_at) * 1e6;
      rtt_[rtt_count_++ % rtt_.size()] = rtt_us;
      report_.commands += 1;
      last_rtt_us_ = rtt_us;
      has_last_rtt_ = true;
      return true;
    }
  }

  // A new hello after `unauthorized` (a restarted daemon): its credential file is read again (without allocating).
  void send_hello_in_loop() { send_hello(); }

  bool apply_command(bool have_command) {
    if (have_command) {
      if (safe_stopped_ && visitor_.mode != Mode::run) safe_stopped_ = false;  // the daemon left run mode
      daemon_mode_ = visitor_.mode;
      late_ = 0;
      std::copy(incoming_tau_.begin(), incoming_tau_.end(), tau_.begin());
    } else {
      has_last_rtt_ = false;
      late_ += 1;
      report_.late_commands += 1;
      report_.max_late_in_a_row = std::max<uint64_t>(report_.max_late_in_a_row, late_);
      if (late_ >= uint64_t(options_.late_limit) && !safe_stopped_) {
        safe_stopped_ = true;
        report_.safe_stops += 1;
      }
    }
    if (daemon_mode_ != Mode::run && daemon_mode_ != Mode::safe_stop) {
      apply(zero_tau_.data(), daemon_mode_);  // idle / stopped, late or not: the robot stays held
      return false;
    }
    if (safe_stopped_) {
      safe_stop_torque(state_, safe_tau_.data());
      apply(safe_tau_.data(), Mode::safe_stop);
    } else {
      apply(tau_.data(), daemon_mode_);
    }
    report_.steps += 1;
    return true;
  }

  void run_lockstep(double t_end) {
    while (!stop_ && clock_time() < t_end) {
      seq_ += 1;
      const double sent_at = send_state();
      if (!receive(sent_at + 0.1, sent_at)) continue;
      if (!apply_command(true)) usleep(static_cast<useconds_t>(options_.period * 1e6));
    }
  }

  void run_realtime(double t_end) {
    const double period = options_.period;
    double boundary = detail::now_s();
    bool have_command = false, first = true;
    while (!stop_ && clock_time() < t_end) {
      if (!first) apply_command(have_command);
      first = false;
      seq_ += 1;
      const double sent_at = send_state();
      lateness_[lateness_count_++ % lateness_.size()] = (sent_at - boundary) * 1e6;
      boundary += period;
      const double late_by = detail::now_s() - boundary;
      if (late_by > 0) {  // the driver itself overran: skip the missed boundaries
        const double skipped = std::ceil(late_by / period);
        report_.overruns += uint64_t(skipped);
        boundary += skipped * period;
      }
      have_command = receive(boundary, sent_at);
      detail::sleep_until(boundary);
    }
  }

  RobotSizes robot_;
  Options options_;
  std::string credential_path_;
  char token_[256] = {0};
  size_t token_len_ = 0;
  zmq::context_t context_;
  zmq::socket_t socket_;
  Welcome welcome_;
  Report report_;
  State state_;
  std::vector<double> tau_, incoming_tau_, safe_tau_, zero_tau_, rtt_, lateness_;
  size_t rtt_count_ = 0, lateness_count_ = 0;
  msgpack::sbuffer out_{1 << 16};
  std::vector<char> in_;
  detail::ReplyVisitor visitor_;
  msgpack::v2::detail::parse_helper<detail::ReplyVisitor> parser_{visitor_};
  uint64_t seq_ = 0, late_ = 0;
  bool safe_stopped_ = false, has_last_rtt_ = false, floating_ = false;
  double last_rtt_us_ = 0.0;
  Mode daemon_mode_ = Mode::idle;
  std::atomic<bool> stop_{false};
};

// ------------------------------------------------------------------------------------------------ the planner
// The planner's side of the reference channel (docs/protocol.md, "Reference channel"): joint targets for the
// daemon's `stream` reference, each message with the daemon's credential. A PUB socket gets no replies: a message
// the daemon refuses is dropped and counted in its stats (reference_unauthorized); refresh_credential() reads a
// restarted daemon's new credential.
class ReferencePublisher {
 public:
  // endpoint: the daemon's [endpoints] reference; control_endpoint: its [endpoints] control (names the credential
  // file); token: the credential itself (default: read the file).
  ReferencePublisher(const std::string& endpoint, const std::string& control_endpoint, std::string token = "")
      : socket_(context_, zmq::socket_type::pub),
        credential_path_(credential_path(control_endpoint)),
        token_(std::move(token)),
        fixed_token_(!token_.empty()) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }

  // Read the daemon's credential again; false when it has made none (not running).
  bool refresh_credential() {
    if (fixed_token_) return true;
    std::ifstream file(credential_path_);
    std::string token;
    if (file) std::getline(file, token);
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
    token_ = token;
    return !token_.empty();
  }

  // Send one target: q_ref rad (m), qd_ref rad/s, qdd_ref rad/s², each nu values in welcome.joint_names order;
  // t s (the planner's clock). False when there is no credential to show (the daemon is not running).
  bool publish(const double* q_ref, const double* qd_ref, const double* qdd_ref, int nu, double t = 0.0) {
    if (token_.empty() && !refresh_credential()) return false;
    out_.clear();
    msgpack::packer<msgpack::sbuffer> pk(out_);
    pk.pack_map(7);
    key(pk, "v"); pk.pack_int(kProtocolVersion);
    key(pk, "type"); str(pk, "reference");
    key(pk, "t"); pk.pack_double(t);
    key(pk, "q"); bin(pk, q_ref, nu);
    key(pk, "qd"); bin(pk, qd_ref, nu);
    key(pk, "qdd"); bin(pk, qdd_ref, nu);
    key(pk, "token"); str(pk, token_.c_str());
    socket_.send(zmq::const_buffer(out_.data(), out_.size()), zmq::send_flags::dontwait);
    return true;
  }

 private:
  static void str(msgpack::packer<msgpack::sbuffer>& pk, const char* text) {
    const uint32_t n = uint32_t(std::strlen(text));
    pk.pack_str(n);
    pk.pack_str_body(text, n);
  }
  static void key(msgpack::packer<msgpack::sbuffer>& pk, const char* text) { str(pk, text); }
  static void bin(msgpack::packer<msgpack::sbuffer>& pk, const double* values, int n) {
    pk.pack_bin(uint32_t(8 * n));
    pk.pack_bin_body(reinterpret_cast<const char*>(values), uint32_t(8 * n));
  }

  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string credential_path_;
  std::string token_;
  bool fixed_token_;
  msgpack::sbuffer out_;
};

}  // namespace idcontrol
