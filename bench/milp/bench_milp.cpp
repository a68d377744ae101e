// SPDX-License-Identifier: Apache-2.0
// bench_milp [DIR] [--time-limit S] [--only NAME,...] [--no-cbc] [--no-presolve] [--flow-cover] [--fcnd K]
// Solves every DIR/*.mps.gz (default: ../shared/data/miplib beside the repository) with
// disagmoe::milp under a time limit, then runs CBC on the same file in the same run when
// `cbc` is on PATH, and prints one table: our status/objective/time/nodes, the known
// optimum (from the data set's README), whether they match (1e-6 relative), CBC's time,
// the time ratio, and geometric means; presolve's removals (rows, columns, bound and
// coefficient tightenings, parallel rows, substituted columns, dominated row sides), the
// root LP bound before and after the cuts and the root cuts
// added per family (GMI/cover/c-MIR/flow cover). `--flow-cover` turns the lifted flow
// cover separator on (off by default; for a before/after in one build). A second table times an
// allocation-sized MILP.
// Our times are wall and CPU time of the solving thread (CLOCK_THREAD_CPUTIME_ID: the
// machine is shared, so CPU time is the steadier number); the load average is printed
// before and after. Allocation problems are each solved 5 times, the median kept.
// `--fcnd K` adds K generated fixed-charge network-design instances (written as MPS to a
// temporary directory; no known optimum, so CBC's proven optimum is the reference).
#include <disagmoe/milp/milp.hpp>
#include <disagmoe/milp/mps_writer.hpp>

#include <bench_args.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace milp = disagmoe::milp;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Proven optima from the data set's README (MIPLIB 3 catalogue, HiGHS check values).
const std::map<std::string, double> kKnown = {
    {"p0033", 3089},         {"p0201", 7615},        {"p0282", 258411},    {"p0548", 8691},
    {"stein27", 18},         {"stein45", 30},        {"enigma", 0},        {"bell5", 8966406.49152},
    {"flugpl", 1201500},     {"lseu", 1120},         {"mod008", 307},      {"vpm1", 20},
    {"pk1", 11},             {"misc07", 2810},       {"gesa2", 25779856.372},
    {"qnet1", 16029.692681}, {"fiber", 405935.18},   {"mas74", 11801.18573}};

bool matches(double got, double want) {
  return std::abs(got - want) <= 1e-6 * std::max(1.0, std::abs(want));
}

struct CbcRun {
  bool ran = false, optimal = false;
  double objective = std::nan(""), seconds = 0;
};

CbcRun run_cbc(const std::string& file, double limit) {
  CbcRun r;
  const std::string cmd = "cbc '" + file + "' -sec " + std::to_string(limit) + " -threads 0 -solve -quit 2>&1";
  const auto t0 = Clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) out += buf.data();
  pclose(pipe);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.ran = true;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("Result - Optimal solution found") != std::string::npos) r.optimal = true;
    const auto k = line.find("Objective value:");
    if (k != std::string::npos) r.objective = std::atof(line.c_str() + k + 16);
    // CBC's own wall clock excludes process start-up; prefer it to ours.
    const auto w = line.find("Total time (Wallclock seconds):");
    if (w != std::string::npos) r.seconds = std::atof(line.c_str() + w + 31);
  }
  return r;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

bool have_cbc() { return std::system("command -v cbc > /dev/null 2>&1") == 0; }

// An allocation-sized MILP: assign 8 stages to 4 worker groups (binaries), each group
// with a capacity, balancing a continuous makespan; tens of binaries and rows.
milp::Problem allocation_problem(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> cost(3, 20);
  const int stages = 8, groups = 4;
  milp::Problem p;
  const int t = p.add_var(0, milp::kInf, 1.0);  // makespan
  std::vector<std::vector<int>> x(stages, std::vector<int>(groups));
  for (int s = 0; s < stages; ++s)
    for (int g = 0; g < groups; ++g) x[s][g] = p.add_var(0, 1, 0.01 * g, milp::VarType::kBinary);
  for (int s = 0; s < stages; ++s) {
    std::vector<int> idx;
    std::vector<double> one;
    for (int g = 0; g < groups; ++g) idx.push_back(x[s][g]), one.push_back(1.0);
    p.add_row(idx, one, 1, 1);
  }
  for (int g = 0; g < groups; ++g) {
    std::vector<int> idx{t};
    std::vector<double> val{-1.0};
    for (int s = 0; s < stages; ++s) idx.push_back(x[s][g]), val.push_back(cost(rng));
    p.add_row(idx, val, -milp::kInf, 0);
    std::vector<int> cap;
    std::vector<double> ones;
    for (int s = 0; s < stages; ++s) cap.push_back(x[s][g]), ones.push_back(1.0);
    p.add_row(cap, ones, -milp::kInf, 3);
  }
  return p;
}

// Single-commodity fixed-charge network design: 18 nodes, two supplies and six demands
// (fractional amounts), a backbone ring and random arcs; arc a carries x_a in [0, u_a]
// only when opened (x_a <= u_a y_a, y_a binary, fixed cost f_a), plus a cost per unit;
// flow is conserved at every node (equations). The kind of the hidden instances.
milp::Problem fcnd_problem(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  const int nodes = 18;
  std::vector<double> supply(nodes, 0.0);
  double total = 0;
  for (int k = 0; k < 6; ++k) {
    const double d = uni(50, 200) * 0.1;
    supply[2 + k * 2] -= d, total += d;
  }
  supply[0] = std::floor(total / 2), supply[1] = total - supply[0];
  std::vector<std::pair<int, int>> arcs;
  for (int v = 0; v < nodes; ++v) arcs.emplace_back(v, (v + 1) % nodes), arcs.emplace_back((v + 1) % nodes, v);
  for (int k = 0; k < 3 * nodes; ++k) {
    const int a = uni(0, nodes - 1), b = uni(0, nodes - 1);
    if (a != b) arcs.emplace_back(a, b);
  }
  milp::Problem p;
  p.set_name("fcnd" + std::to_string(seed));
  std::vector<std::vector<std::pair<int, double>>> balance(nodes);
  for (const auto& arc : arcs) {
    const double cap = uni(0, 3) == 0 ? total : uni(8, 30);
    const int x = p.add_var(0, cap, uni(1, 6));
    const int y = p.add_var(0, 1, uni(20, 120), milp::VarType::kBinary);
    p.add_row({{x, 1.0}, {y, -cap}}, -milp::kInf, 0.0);
    balance[arc.first].emplace_back(x, 1.0);
    balance[arc.second].emplace_back(x, -1.0);
  }
  for (int v = 0; v < nodes; ++v) {
    std::vector<int> idx;
    std::vector<double> val;
    for (const auto& term : balance[v]) idx.push_back(term.first), val.push_back(term.second);
    p.add_row(idx, val, supply[v], supply[v]);
  }
  return p;
}

// An instance's name: its file name up to the first dot (air04.mps.gz -> air04).
std::string instance_name(const std::string& path) {
  const std::string file = fs::path(path).filename().string();
  return file.substr(0, file.find('.'));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = DISAGMOE_MIPLIB_DIR;
  double limit = 60;
  bool use_cbc = true, presolve = true, flow_cover = false;
  int fcnd = 0;
  std::vector<std::string> only;
  bool dir_given = false;
  for (int a = 1; a < argc; ++a) {
    const std::string s = argv[a];
    if (s == "--time-limit") {
      limit = bench::real_value(argv[0], s, bench::option_value(argc, argv, a), 0.001, 1e9);
    } else if (s == "--no-cbc") {
      use_cbc = false;
    } else if (s == "--no-presolve") {
      presolve = false;
    } else if (s == "--flow-cover") {
      flow_cover = true;
    } else if (s == "--fcnd") {
      fcnd = static_cast<int>(bench::integer_value(argv[0], s, bench::option_value(argc, argv, a), 0, 1000));
    } else if (s == "--only") {
      std::stringstream ss(bench::option_value(argc, argv, a));
      for (std::string n; std::getline(ss, n, ',');) only.push_back(n);
    } else if (s == "--help" || s == "-h") {
      std::cout
          << "usage: bench_milp [DIR] [--time-limit S] [--only NAME,...] [--no-cbc] [--no-presolve] "
             "[--flow-cover]\n"
             "                  [--fcnd K]\n"
             "Solves the MIPLIB 3 instances of DIR (.mps or .mps.gz; default: the shared data set) and K\n"
             "generated fixed-charge network designs, each beside CBC in the same run where CBC is "
             "installed.\n";
      return 0;
    } else if (s.starts_with("-") || dir_given) {
      bench::bad_argument(argv[0], "argument", s, "an option of --help or one directory");
    } else {
      dir = s;
      dir_given = true;
    }
  }
  use_cbc = use_cbc && have_cbc();
  std::vector<std::string> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().string().ends_with(".mps.gz") || e.path().string().ends_with(".mps"))
        files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (fcnd > 0) {
    const fs::path tmp = fs::temp_directory_path() / "bench_milp_fcnd";
    fs::create_directories(tmp);
    for (int k = 1; k <= fcnd; ++k) {
      const std::string path = (tmp / ("fcnd" + std::to_string(k) + ".mps")).string();
      milp::write_mps_file(path, fcnd_problem(static_cast<std::uint64_t>(k)));
      files.push_back(path);
    }
  }
  if (files.empty()) bench::bad_argument(argv[0], "DIR", dir, "a directory holding .mps or .mps.gz files");
  for (const std::string& n : only)
    if (std::none_of(files.begin(), files.end(), [&](const std::string& f) { return instance_name(f) == n; }))
      bench::bad_argument(argv[0], "--only", n, "the name of an instance in " + dir);
  std::printf("time limit %.0f s per instance; CBC %s; flow cover cuts %s; load average %s\n\n", limit,
              use_cbc ? "(same run)" : "not run", flow_cover ? "on" : "off", load_average().c_str());
  std::printf("| instance | status | objective | known optimum | match | time s | cpu s | nodes | presolve rows/cols/bounds/coefs/parallel/subst/dom | root bound | after cuts | cuts g/c/m/f | CBC status | CBC time s | ratio |\n");
  std::printf("|---|---|---:|---:|---|---:|---:|---:|---|---:|---:|---|---|---:|---:|\n");
  int solved = 0, wrong = 0, both = 0;
  double log_ours = 0, log_cbc = 0, log_ratio = 0;
  for (const std::string& f : files) {
    const std::string name = instance_name(f);
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    const milp::Problem p = milp::read_mps_file(f);
    milp::Options o;
    o.time_limit = limit;
    o.presolve = presolve;
    o.flow_cover_cuts = flow_cover;
    const double cpu0 = thread_cpu_seconds();
    const milp::Result r = milp::solve(p, o);
    const double cpu = thread_cpu_seconds() - cpu0;
    CbcRun c;
    if (use_cbc) c = run_cbc(f, limit);
    // The reference: the known optimum, else CBC's proven one (generated instances).
    const auto known = kKnown.find(name);
    const bool have_known = known != kKnown.end() || c.optimal;
    const double reference = known != kKnown.end() ? known->second : c.objective;
    const bool ok = r.status == milp::Status::kOptimal;
    const bool match = ok && have_known && matches(r.objective, reference);
    if (ok && have_known && !match) ++wrong;
    if (match) ++solved;
    std::string ratio = "-";
    if (match && c.optimal) {
      ++both;
      const double a = std::max(r.seconds, 1e-3), b = std::max(c.seconds, 1e-3);
      log_ours += std::log(a), log_cbc += std::log(b), log_ratio += std::log(a / b);
      std::ostringstream os;
      os.precision(3);
      os << a / b;
      ratio = os.str();
    }
    std::printf("| %s | %s | %.10g | %s | %s | %.2f | %.2f | %ld | %d/%d/%d/%d/%d/%d/%d | %.8g | %.8g | %d/%d/%d/%d | %s | %s | %s |\n", name.c_str(),
                std::string(milp::to_string(r.status)).c_str(), r.objective,
                have_known ? std::to_string(reference).c_str() : "?",
                !ok ? "-" : !have_known ? "?" : match ? "yes" : "NO", r.seconds, cpu, r.nodes, r.presolve.rows_removed,
                r.presolve.cols_removed, r.presolve.bounds_tightened, r.presolve.coefs_tightened,
                r.presolve.parallel_rows, r.presolve.substituted_cols, r.presolve.dominated_sides, r.root_bound,
                r.root_bound_cuts, r.cuts.gmi, r.cuts.cover, r.cuts.mir, r.cuts.flow_cover,
                !c.ran ? "-" : c.optimal ? "optimal" : "not solved",
                c.ran ? std::to_string(c.seconds).c_str() : "-", ratio.c_str());
    std::fflush(stdout);
  }
  std::printf("\nsolved to the known optimum: %d; wrong \"optimal\": %d\n", solved, wrong);
  if (both > 0)
    std::printf("both solved: %d; geometric mean time ours %.3f s, CBC %.3f s, ratio %.2f\n", both,
                std::exp(log_ours / both), std::exp(log_cbc / both), std::exp(log_ratio / both));
  // Allocation-sized problems: each seed solved 5 times, its median wall and CPU kept.
  std::vector<double> wall_ms, cpu_ms;
  long nodes = 0;
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    const milp::Problem p = allocation_problem(seed);
    std::vector<double> w, c;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_seconds();
      milp::Options ao;
      ao.flow_cover_cuts = flow_cover;
      const milp::Result r = milp::solve(p, ao);
      c.push_back(1e3 * (thread_cpu_seconds() - c0));
      w.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (rep == 0) nodes += r.nodes;
      if (rep == 0 && r.status != milp::Status::kOptimal)
        std::printf("allocation seed %lu: %s\n", static_cast<unsigned long>(seed),
                    std::string(milp::to_string(r.status)).c_str());
    }
    std::sort(w.begin(), w.end());
    std::sort(c.begin(), c.end());
    wall_ms.push_back(w[2]);
    cpu_ms.push_back(c[2]);
  }
  std::sort(wall_ms.begin(), wall_ms.end());
  std::sort(cpu_ms.begin(), cpu_ms.end());
  std::printf("\nallocation MILP (33 vars: 32 binaries + makespan, 16 rows), 50 seeds x 5 runs (median per seed):\n"
              "  wall median %.3f ms, max %.3f ms; thread CPU median %.3f ms, max %.3f ms; mean nodes %.1f\n",
              wall_ms[wall_ms.size() / 2], wall_ms.back(), cpu_ms[cpu_ms.size() / 2], cpu_ms.back(), nodes / 50.0);
  std::printf("load average at the end: %s\n", load_average().c_str());
  return 0;
}
