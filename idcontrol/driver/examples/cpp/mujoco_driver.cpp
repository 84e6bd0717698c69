// An example C++ robot driver: the quadruped simulated with MuJoCo's C API stands in for a robot's SDK, and
// idcontrol/driver.hpp connects it to the idcontrol daemon at the daemon's rate, in real time.
//
// The MuJoCo model is the one the Python bridge builds from the same URDF (free joint "root_joint", one motor
// per actuated joint in the daemon's joint order, contact spheres "contact:<name>"), written by
//   idcontrol driver --mujoco-model LAUNCH_FILE quadruped.mjb
// It sends the form of state the daemon's welcome asks for: the full state (the simulator's base pose and twist),
// or, for a daemon that estimates the base (state_form "sensors"), what a legged robot measures: the joints and an
// IMU at the base link (the quadruped's robot file names no other imu_frame), noise-free.
// Usage:
//   mujoco_driver --model quadruped.mjb [--endpoint E] [--robot quadruped] [--duration S]
//                 [--priority P] [--cpu N] [--spin-us US] [--lockstep]
// E is the daemon's control endpoint, by default the private one a launch file without [endpoints] binds
// (ipc://RUNTIME/control, docs/protocol.md "Transport"). It prints its report as one JSON line {"bridge": {...}}
// when it stops (SIGINT, SIGTERM or --duration).
#include <idcontrol/driver.hpp>
#include <mujoco/mujoco.h>

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

// Every operator new of this program is counted, so the report can say how many happened inside the loop.
static std::atomic<unsigned long> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

class MujocoQuadruped final : public idcontrol::Driver {
 public:
  MujocoQuadruped(mjModel* m, mjData* d, idcontrol::RobotSizes sizes, idcontrol::Driver::Options options)
      : Driver(std::move(sizes), std::move(options)), m_(m), d_(d) {}

  // Map the daemon's names (welcome) onto the MuJoCo model, once, after hello.
  void index(const idcontrol::Welcome& w) {
    // the daemon's period (welcome dt) in whole physics steps of the model
    steps_per_period_ = std::max(1, int(std::lround(period() / m_->opt.timestep)));
    sensors_ = w.sensors();
    const int root = mj_name2id(m_, mjOBJ_JOINT, "root_joint");
    if (root < 0) throw std::runtime_error("the model has no free joint 'root_joint'");
    base_q_ = m_->jnt_qposadr[root];
    base_v_ = m_->jnt_dofadr[root];
    for (const auto& name : w.joint_names) {
      const int j = mj_name2id(m_, mjOBJ_JOINT, name.c_str());
      const int a = mj_name2id(m_, mjOBJ_ACTUATOR, name.c_str());
      if (j < 0 || a < 0) throw std::runtime_error("the model lacks joint or actuator " + name);
      joint_q_.push_back(m_->jnt_qposadr[j]);
      joint_v_.push_back(m_->jnt_dofadr[j]);
      actuator_.push_back(a);
    }
    sphere_of_geom_.assign(m_->ngeom, -1);
    for (size_t k = 0; k < w.contact_names.size(); ++k) {
      const int g = mj_name2id(m_, mjOBJ_GEOM, ("contact:" + w.contact_names[k]).c_str());
      if (g < 0) throw std::runtime_error("the model lacks the contact sphere geom contact:" + w.contact_names[k]);
      sphere_of_geom_[g] = int(k);
    }
  }

  // The state in the protocol's conventions: MuJoCo's free joint has [position, quaternion w x y z] and
  // [linear velocity in world, angular velocity in the body frame]; the protocol wants x y z w and both
  // velocities in the base frame.
  void read_state(idcontrol::State& s) override {
    s.t = d_->time;
    const mjtNum* qpos = d_->qpos + base_q_;
    const mjtNum* qvel = d_->qvel + base_v_;
    mjtNum rotation[9];
    mju_quat2Mat(rotation, qpos + 3);
    for (int i = 0; i < 3; ++i) s.q[i] = qpos[i];
    s.q[3] = qpos[4]; s.q[4] = qpos[5]; s.q[5] = qpos[6]; s.q[6] = qpos[3];
    mju_mulMatTVec(s.v.data(), rotation, qvel, 3, 3);  // world -> base frame
    for (int i = 0; i < 3; ++i) s.v[3 + i] = qvel[3 + i];
    for (size_t i = 0; i < joint_q_.size(); ++i) {
      s.q[7 + i] = d_->qpos[joint_q_[i]];
      s.v[6 + i] = d_->qvel[joint_v_[i]];
    }
    std::fill(s.contact_forces.begin(), s.contact_forces.end(), 0.0);
    for (int c = 0; c < d_->ncon; ++c) {
      const mjContact& con = d_->contact[c];
      const int s1 = sphere_of_geom_[con.geom[0]], s2 = sphere_of_geom_[con.geom[1]];
      if (s1 < 0 && s2 < 0) continue;
      mjtNum wrench[6], on_geom2[3];
      mj_contactForce(m_, d_, c, wrench);
      mju_mulMatTVec(on_geom2, con.frame, wrench, 3, 3);  // contact frame -> world
      for (int i = 0; i < 3; ++i) {
        if (s2 >= 0) s.contact_forces[3 * s2 + i] += on_geom2[i];
        if (s1 >= 0) s.contact_forces[3 * s1 + i] -= on_geom2[i];
      }
    }
    s.has_contact_forces = !s.contact_forces.empty();
    s.has_imu = sensors_;
    if (sensors_) read_imu(s.imu, rotation, qvel);
  }

  // The IMU at the base link: orientation world <- base (x y z w), the gyro (MuJoCo's free joint keeps the angular
  // velocity in the body frame), and the specific force R^T (a + g e_z), a the base origin's world acceleration over
  // the last period (the difference of its world velocities; at rest before the first step).
  void read_imu(idcontrol::Imu& imu, const mjtNum* rotation, const mjtNum* qvel) {
    const mjtNum* quat_wxyz = d_->qpos + base_q_ + 3;
    imu.orientation_xyzw = {quat_wxyz[1], quat_wxyz[2], quat_wxyz[3], quat_wxyz[0]};
    for (int i = 0; i < 3; ++i) imu.angular_velocity[i] = qvel[3 + i];
    if (d_->time > velocity_at_) {
      if (velocity_at_ >= 0.0)
        for (int i = 0; i < 3; ++i) acceleration_[i] = (qvel[i] - velocity_[i]) / (d_->time - velocity_at_);
      for (int i = 0; i < 3; ++i) velocity_[i] = qvel[i];
      velocity_at_ = d_->time;
    }
    const mjtNum specific_force_world[3] = {acceleration_[0], acceleration_[1], acceleration_[2] + 9.81};
    mju_mulMatTVec(imu.linear_acceleration.data(), rotation, specific_force_world, 3, 3);  // world -> IMU
    imu.t = d_->time;
  }

  // run and safe_stop: step with tau; idle and stopped: the simulated robot holds still (brakes on).
  void apply(const double* tau, idcontrol::Mode mode) override {
    if (mode != idcontrol::Mode::run && mode != idcontrol::Mode::safe_stop) return;
    for (size_t i = 0; i < actuator_.size(); ++i) d_->ctrl[actuator_[i]] = tau[i];
    for (int i = 0; i < steps_per_period_; ++i) mj_step(m_, d_);
    const double z = d_->qpos[base_q_ + 2];
    height_min_ = std::min(height_min_, z);
    height_max_ = std::max(height_max_, z);
  }

  double clock_time() override { return d_->time; }
  bool sensors() const { return sensors_; }
  // The base height's range over the driven periods, m (the simulator's truth).
  double height_min() const { return height_min_; }
  double height_max() const { return height_max_; }

 private:
  mjModel* m_;
  mjData* d_;
  int base_q_ = 0, base_v_ = 0, steps_per_period_ = 1;
  std::vector<int> joint_q_, joint_v_, actuator_, sphere_of_geom_;
  bool sensors_ = false;
  mjtNum velocity_[3] = {0, 0, 0}, acceleration_[3] = {0, 0, 0};  // base origin, world frame, m/s and m/s²
  double velocity_at_ = -1.0;                                       // s, when velocity_ was taken (-1: never)
  double height_min_ = INFINITY, height_max_ = -INFINITY;
};

MujocoQuadruped* g_driver = nullptr;

void on_signal(int) {
  if (g_driver) g_driver->request_stop();
}

void usage() {
  std::cerr << "usage: mujoco_driver --model FILE.mjb [--endpoint E] [--robot NAME] [--duration S] [--priority P]"
               " [--cpu N] [--spin-us US] [--lockstep]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, endpoint = idcontrol::private_endpoint("control"), robot = "quadruped";
  double duration = 0.0, spin_us = 0.0;
  int priority = 0, cpu = -1;
  bool lockstep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) { usage(); std::exit(2); }
      return argv[++i];
    };
    if (arg == "--model") model_path = value();
    else if (arg == "--endpoint") endpoint = value();
    else if (arg == "--robot") robot = value();
    else if (arg == "--duration") duration = std::stod(value());
    else if (arg == "--priority") priority = std::stoi(value());
    else if (arg == "--cpu") cpu = std::stoi(value());
    else if (arg == "--spin-us") spin_us = std::stod(value());
    else if (arg == "--lockstep") lockstep = true;
    else { usage(); return 2; }
  }
  if (model_path.empty()) { usage(); return 2; }

  mjModel* m = mj_loadModel(model_path.c_str(), nullptr);
  if (!m) {
    std::cerr << "mujoco_driver: cannot load the MuJoCo model " << model_path << "\n";
    return 2;
  }
  mjData* d = mj_makeData(m);
  const int initial = mj_name2id(m, mjOBJ_KEY, "initial");  // the configuration the Python bridge starts from
  if (initial >= 0) mj_resetDataKeyframe(m, d, initial);
  mj_forward(m, d);  // contact forces of the initial configuration

  idcontrol::RobotSizes sizes{robot, int(m->nq), int(m->nv), int(m->nu), {}};  // the model holds the robot only
  idcontrol::Driver::Options options;
  options.endpoint = endpoint;
  options.realtime = !lockstep;
  options.spin_us = spin_us;

  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("mujoco_driver: sched_setaffinity");
  }
  if (priority > 0) {
    sched_param param{};
    param.sched_priority = priority;
    if (sched_setscheduler(0, SCHED_FIFO, &param) != 0)
      std::perror("mujoco_driver: SCHED_FIFO refused, running at normal priority");
  }

  int code = 0;
  try {
    MujocoQuadruped driver(m, d, sizes, options);
    g_driver = &driver;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const idcontrol::Welcome& welcome = driver.hello(30.0);
    driver.index(welcome);
    const unsigned long before = g_allocations.load();
    const idcontrol::Report& report = driver.run(duration);
    const unsigned long in_loop = g_allocations.load() - before;
    std::string json = report.json();
    json.pop_back();  // add the example's own fields to the report object
    std::printf("{\"bridge\": %s, \"allocations_in_loop\": %lu, \"sim_time\": %.6f, \"base_position\": [%.6f, %.6f, "
                "%.6f], \"state_form\": \"%s\", \"base_height_range\": [%.6f, %.6f]}}\n", json.c_str(), in_loop, d->time,
                d->qpos[0], d->qpos[1], d->qpos[2], driver.sensors() ? "sensors" : "full",
                std::isfinite(driver.height_min()) ? driver.height_min() : d->qpos[2],
                std::isfinite(driver.height_max()) ? driver.height_max() : d->qpos[2]);
    std::fflush(stdout);
    g_driver = nullptr;
  } catch (const std::exception& e) {
    std::cerr << "mujoco_driver: " << e.what() << "\n";
    code = 2;
  }
  mj_deleteData(d);
  mj_deleteModel(m);
  return code;
}
