// Black-box tests of loom-perf and loom-plot (found through $LOOM_PERF, $LOOM_PLOT and
// $LOOMRUN): the table reads like nccl-tests' for every collective and rank count, its
// sizes, counts and bandwidth factors are nccl-tests', #wrong counts a corrupted element,
// JSON and CSV hold the table's numbers, the plot is drawn, and it runs under the
// launchers' environments.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/free_port.h"

namespace {

std::string envPath(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

struct Result {
  int status = -1;  // exit status, or -1 when killed
  std::string out;
};

// Runs `command` under sh with a deadline, stdout and stderr together.
Result run(const std::string& command) {
  Result r;
  FILE* p = popen(("timeout -k 5 120 sh -c '" + command + "' 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int w = pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

std::string perf() { return envPath("LOOM_PERF"); }
std::string loomrun(int n) { return envPath("LOOMRUN") + " -n " + std::to_string(n) + " "; }

struct Mode {
  bool measured = false;
  double time = 0, algbw = 0, busbw = 0;
  long wrong = 0;
};

struct Row {
  size_t bytes = 0, count = 0;
  std::string type, op;
  int root = 0;
  Mode oop, ip;
};

// Every non-comment line must be a row of nccl-tests' 13 columns.
std::vector<Row> rowsOf(const std::string& out, std::string* bad) {
  std::vector<Row> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("loomrun:", 0) == 0 || line.find("LOOM WARN") != std::string::npos) continue;
    std::istringstream words(line);
    std::vector<std::string> f;
    for (std::string w; words >> w;) f.push_back(w);
    if (f.size() != 13) {
      *bad += line + "\n";
      continue;
    }
    Row r;
    r.bytes = std::stoull(f[0]);
    r.count = std::stoull(f[1]);
    r.type = f[2];
    r.op = f[3];
    r.root = std::stoi(f[4]);
    for (int m = 0; m < 2; ++m) {
      Mode& mode = m == 0 ? r.oop : r.ip;
      const size_t at = 5 + 4 * static_cast<size_t>(m);
      if (f[at] == "-") continue;
      mode.measured = true;
      mode.time = std::stod(f[at]);
      mode.algbw = std::stod(f[at + 1]);
      mode.busbw = std::stod(f[at + 2]);
      mode.wrong = std::stol(f[at + 3]);
    }
    rows.push_back(r);
  }
  return rows;
}

bool has(const std::string& out, const std::string& text) { return out.find(text) != std::string::npos; }

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

std::string readFile(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// ---- Every collective, as processes and as threads ------------------------------------

struct TableCase {
  const char* collective;
  int nranks;
  bool threads;  // -t N in one process, else loomrun -n N
};

std::string caseName(const testing::TestParamInfo<TableCase>& info) {
  return std::string(info.param.collective) + "_" + std::to_string(info.param.nranks) +
         (info.param.threads ? "_threads" : "_processes");
}

class Table : public testing::TestWithParam<TableCase> {};

// nccl-tests' busbw factors, written out from its sources.
double factor(const std::string& c, int n) {
  if (c == "allreduce") return 2.0 * (n - 1) / n;
  if (c == "allgather" || c == "reducescatter" || c == "alltoall") return static_cast<double>(n - 1) / n;
  return 1.0;
}

TEST_P(Table, ReadsLikeNcclTests) {
  const TableCase& t = GetParam();
  const std::string c = t.collective;
  const std::string args = " " + c + " -b 8 -e 256K -f 8 -n 3 -w 1";
  const Result r = run(t.threads ? perf() + args + " -t " + std::to_string(t.nranks)
                                 : loomrun(t.nranks) + perf() + args);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "#       size         count      type   redop    root     time   algbw   busbw")) << r.out;
  EXPECT_TRUE(has(r.out, "# Out of bounds values : 0 OK")) << r.out;
  EXPECT_TRUE(has(r.out, "# Avg bus bandwidth    : ")) << r.out;
  EXPECT_TRUE(has(r.out, "# Collective test concluded: loom-perf " + c)) << r.out;
  std::string bad;
  const std::vector<Row> rows = rowsOf(r.out, &bad);
  EXPECT_EQ(bad, "");
  ASSERT_EQ(rows.size(), 6u) << r.out;  // 8 B .. 256 KiB by 8
  const bool perRank = c == "allgather" || c == "reducescatter" || c == "alltoall";
  const bool rooted = c == "broadcast" || c == "reduce";
  const bool reducing = c == "allreduce" || c == "reduce" || c == "reducescatter";
  size_t size = 8;
  for (const Row& row : rows) {
    SCOPED_TRACE(std::to_string(size) + " B");
    size_t count = size / 4, bytes = size;
    if (perRank) {
      count = (size / 4 / static_cast<size_t>(t.nranks)) & ~size_t{3};  // 16-byte shares
      bytes = count * 4 * static_cast<size_t>(t.nranks);
    }
    EXPECT_EQ(row.bytes, bytes);
    EXPECT_EQ(row.count, count);
    EXPECT_EQ(row.type, "float");
    EXPECT_EQ(row.op, reducing ? "sum" : "none");
    EXPECT_EQ(row.root, rooted ? 0 : -1);
    const bool inPlace = c != "alltoall" && c != "sendrecv";
    EXPECT_TRUE(row.oop.measured);
    EXPECT_EQ(row.ip.measured, inPlace);
    for (const Mode* m : {&row.oop, &row.ip}) {
      if (!m->measured) continue;
      EXPECT_EQ(m->wrong, 0);
      EXPECT_GT(m->time, 0);
      // algbw = algorithm bytes / time; busbw = algbw * factor (2 decimals printed). The time
      // is printed to 0.01 µs, so a call of 0.2 µs (a lone rank's copy of 512 B on a fast
      // core) reads up to 2.5 % off the time algbw was computed from.
      const double algBytes = static_cast<double>(perRank ? count * 4 * static_cast<size_t>(t.nranks) : count * 4);
      const double timeRounding = 0.005 / m->time;
      EXPECT_NEAR(m->algbw, algBytes / (m->time * 1e3), 0.006 + (0.02 + timeRounding) * m->algbw);
      EXPECT_NEAR(m->busbw, m->algbw * factor(c, t.nranks), 0.011 + 0.005 * m->busbw);
    }
    size *= 8;
  }
}

std::vector<TableCase> tableCases() {
  std::vector<TableCase> out;
  for (const char* c : {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "sendrecv"})
    for (int n : {1, 2, 3})
      for (bool threads : {false, true})
        if (!(n == 1 && threads)) out.push_back({c, n, threads});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Collectives, Table, testing::ValuesIn(tableCases()), caseName);

// ---- The check can fail ----------------------------------------------------------------

class Corrupt : public testing::TestWithParam<const char*> {};

TEST_P(Corrupt, OneChangedElementIsCountedAndFails) {
  const std::string c = GetParam();
  const Result r = run(loomrun(2) + perf() + " " + c + " -b 1K -e 4K -f 4 -n 2 --test-corrupt");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "# Out of bounds values : ")) << r.out;
  EXPECT_TRUE(has(r.out, " FAILED")) << r.out;
  std::string bad;
  const std::vector<Row> rows = rowsOf(r.out, &bad);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (const Row& row : rows) {
    EXPECT_EQ(row.oop.wrong, 1) << r.out;
    if (row.ip.measured) {
      EXPECT_EQ(row.ip.wrong, 1) << r.out;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, Corrupt,
                         testing::Values("allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                                         "alltoall", "sendrecv"));

// ---- Types, ops, roots, options ---------------------------------------------------------

TEST(LoomPerf, EveryTypeAndOpChecksOut) {
  for (const char* c : {"allreduce", "reduce", "reducescatter"}) {
    const Result r = run(perf() + " " + c + " -t 3 -b 64 -e 64K -f 32 -n 1 -d all -o all");
    ASSERT_EQ(r.status, 0) << r.out;
    std::string bad;
    const std::vector<Row> rows = rowsOf(r.out, &bad);
    EXPECT_EQ(rows.size(), 12u * 5u * 3u) << c;
    std::map<std::string, int> types, ops;
    for (const Row& row : rows) {
      ++types[row.type];
      ++ops[row.op];
      EXPECT_EQ(row.oop.wrong + row.ip.wrong, 0) << row.type << " " << row.op;
    }
    EXPECT_EQ(types.size(), 12u);
    EXPECT_EQ(ops.size(), 5u);
    for (const char* name : {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
                             "bfloat16", "f8e4m3", "f8e5m2"})
      EXPECT_EQ(types[name], 15) << name;
  }
}

TEST(LoomPerf, RootMinusOneRunsEveryRoot) {
  const Result r = run(perf() + " broadcast -t 3 -g 2 -r -1 -b 1K -e 2K -f 2 -n 2");
  ASSERT_EQ(r.status, 0) << r.out;
  std::string bad;
  std::map<int, int> roots;
  for (const Row& row : rowsOf(r.out, &bad)) {
    ++roots[row.root];
    EXPECT_EQ(row.oop.wrong + row.ip.wrong, 0);
  }
  EXPECT_EQ(roots.size(), 6u);  // 3 threads x 2 ranks each
  for (auto& [root, n] : roots) EXPECT_EQ(n, 2) << "root " << root;
}

TEST(LoomPerf, TimingOptionsAndHostStreams) {
  // -a, -z, -m, -N and -y 0 change how calls are issued and timed, never the result.
  for (const char* options : {"-a 0", "-a 2", "-a 3", "-z 1", "-m 3", "-y 0", "-y 0 -z 1 -m 2", "-N 2"}) {
    const Result r = run(loomrun(2) + perf() + " allreduce -b 4K -e 64K -f 16 -n 4 " + options);
    ASSERT_EQ(r.status, 0) << options << "\n" << r.out;
    std::string bad;
    const std::vector<Row> rows = rowsOf(r.out, &bad);
    EXPECT_EQ(rows.size(), std::string(options) == "-N 2" ? 4u : 2u) << options;
    for (const Row& row : rows) EXPECT_EQ(row.oop.wrong + row.ip.wrong, 0) << options;
  }
}

TEST(LoomPerf, MinTimeLengthensTheTimedLoop) {
  char dir[] = "/tmp/loom-perf-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string json = std::string(dir) + "/r.json";
  const Result r = run(loomrun(2) + perf() + " allreduce -b 8 -e 8 -n 1 --min-time 0.05 --json " + json);
  ASSERT_EQ(r.status, 0) << r.out;
  std::smatch m;
  const std::string s = readFile(json);
  ASSERT_TRUE(std::regex_search(s, m, std::regex("\"iterations\": ([0-9]+)"))) << s;
  EXPECT_GT(std::stol(m[1]), 1) << "an 8-byte allreduce takes far less than 50 ms";
  run(std::string("rm -rf ") + dir);
}

TEST(LoomPerf, RunsAsNcclTestsName) {
  char dir[] = "/tmp/loom-perf-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string link = std::string(dir) + "/all_gather_perf";
  ASSERT_EQ(symlink(perf().c_str(), link.c_str()), 0);
  const Result r = run(loomrun(2) + link + " -b 1K -e 1K");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "# Collective test starting: all_gather_perf")) << r.out;
  const Result byName = run(perf() + " reduce_scatter_perf -b 1K -e 1K");
  EXPECT_EQ(byName.status, 0) << byName.out;
  run(std::string("rm -rf ") + dir);
}

TEST(LoomPerf, BadArgumentsSayWhatIsWrong) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {Case{"", "name a collective"}, Case{"gather", "'gather' is not a collective"},
                        Case{"allreduce -b 4K -e 1K", "-e must be at least -b"},
                        Case{"allreduce -d float128", "-d float128: not a type"},
                        Case{"allreduce -o mean", "-o mean"}, Case{"allreduce -a 4", "-a 4"},
                        Case{"allreduce -b 1X", "-b 1X: not a size"},
                        Case{"allreduce --plot out.png", "writes SVG"},
                        Case{"sendrecv --algo ring", "sendrecv has no algorithm"},
                        Case{"allreduce -G 2", "-G 2: CUDA graphs need --device cuda"},
                        Case{"allreduce --device cuda -y 1", "never uses the legacy NULL stream"}}) {
    const Result r = run(perf() + " " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, c.message)) << c.args << "\n" << r.out;
  }
  // Refused by Loom itself, at communicator creation: an error and exit 1, no hang.
  const Result algo = run(loomrun(2) + perf() + " broadcast --algo rd -b 1K -e 1K");
  EXPECT_EQ(algo.status, 1) << algo.out;
  EXPECT_TRUE(has(algo.out, "broadcast has no rd algorithm")) << algo.out;
}

// --device cuda: without a GPU (or without CUDA in this build) a clear refusal, status 2; on a
// GPU, a small checked sweep on 2 ranks sharing device 0, called one by one and through a CUDA
// graph. loom-perf itself finds out which: this process never initialises CUDA.
TEST(LoomPerf, DeviceCudaRunsOrSaysWhyNot) {
  const std::string args = " allreduce -b 8 -e 1K -f 4 --device cuda -c 1 -t 2";
  const Result r = run(perf() + args);
  if (r.status == 2 && has(r.out, "loom-perf: --device cuda: this Loom was built without CUDA")) {
    std::printf("built without CUDA: checked the refusal only\n");
    return;
  }
  if (r.status == 2 || has(r.out, "no CUDA device")) {
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_TRUE(has(r.out, "loom-perf: --device cuda: no CUDA device (")) << r.out;
    std::printf("no CUDA device here: checked the refusal only\n");
    return;
  }
  for (const char* graph : {"", " -G 2"}) {
    const Result d = graph[0] ? run(perf() + args + graph) : r;
    EXPECT_EQ(d.status, 0) << graph << "\n" << d.out;
    EXPECT_TRUE(has(d.out, "device memory, a non-blocking CUDA stream per rank")) << d.out;
    EXPECT_EQ(countOf(d.out, "device  0 ["), 2u) << d.out;  // both ranks on GPU 0
    std::string bad;
    const std::vector<Row> rows = rowsOf(d.out, &bad);
    EXPECT_EQ(rows.size(), 4u) << d.out;  // 8, 32, 128, 512 B
    EXPECT_TRUE(bad.empty()) << bad;
    for (const Row& row : rows) {
      EXPECT_TRUE(row.oop.measured && row.ip.measured) << d.out;
      EXPECT_EQ(row.oop.wrong, 0) << row.bytes << graph << "\n" << d.out;
      EXPECT_EQ(row.ip.wrong, 0) << row.bytes << graph << "\n" << d.out;
    }
  }
}

TEST(LoomPerf, ProgressLineOnlyOnATerminal) {
  if (run("command -v script").status != 0) GTEST_SKIP() << "skipped: script(1) is not installed (util-linux)";
  // script(1) gives loom-perf a terminal; the progress line goes to stderr there.
  const Result tty = run("script -qec \"" + perf() + " allreduce -t 2 -b 1K -e 4K -f 4 -n 2\" /dev/null");
  EXPECT_EQ(tty.status, 0) << tty.out;
  EXPECT_TRUE(has(tty.out, "[1/2] allreduce float sum 1024 B")) << tty.out;
  const Result pipe = run(perf() + " allreduce -t 2 -b 1K -e 4K -f 4 -n 2");
  EXPECT_FALSE(has(pipe.out, "[1/2]")) << pipe.out;
}

// ---- JSON, CSV and the plot --------------------------------------------------------------

TEST(LoomPerf, JsonCsvAndPlotHoldTheTable) {
  char dir[] = "/tmp/loom-perf-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  const Result r = run(loomrun(2) + perf() + " allreduce -b 1K -e 64K -f 8 -n 3 --algo ring,tuned --json " + d +
                       "/r.json --csv " + d + "/r.csv --plot " + d + "/r.svg");
  ASSERT_EQ(r.status, 0) << r.out;
  std::string bad;
  const std::vector<Row> rows = rowsOf(r.out, &bad);
  ASSERT_EQ(rows.size(), 6u) << r.out;  // 3 sizes x 2 algorithms
  EXPECT_TRUE(has(r.out, "# Algorithm: ring (LOOM_ALGO=allreduce=ring)"));
  // "tuned" leaves the choice to Loom, as without --algo.
  EXPECT_TRUE(has(r.out, "# Algorithm: tuned (Loom's choice per call)"));

  // CSV: one line per row, same order, numbers matching the table's rounding.
  std::ifstream csv(d + "/r.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("algorithm,size,count,type,redop,root,iterations,oop_time_us", 0), 0u) << line;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE(std::getline(csv, line));
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 15u) << line;
    EXPECT_EQ(f[0], i < 3 ? "ring" : "tuned");
    EXPECT_EQ(std::stoull(f[1]), rows[i].bytes);
    EXPECT_EQ(std::stoull(f[2]), rows[i].count);
    EXPECT_NEAR(std::stod(f[7]), rows[i].oop.time, 0.0051 + 0.001 * rows[i].oop.time);
    EXPECT_NEAR(std::stod(f[9]), rows[i].oop.busbw, 0.0051 + 0.001 * rows[i].oop.busbw);
    EXPECT_NEAR(std::stod(f[11]), rows[i].ip.time, 0.0051 + 0.001 * rows[i].ip.time);
    EXPECT_EQ(std::stol(f[14]), rows[i].ip.wrong);
  }

  // JSON: one result object per line, with the same numbers.
  std::ifstream json(d + "/r.json");
  std::vector<std::string> results;
  while (std::getline(json, line))
    if (has(line, "\"size\":")) results.push_back(line);
  ASSERT_EQ(results.size(), rows.size());
  const std::regex fields(
      "\"size\": ([0-9]+), \"count\": ([0-9]+).*\"out_of_place\": \\{\"time\": ([0-9.e+-]+), \"alg_bw\": "
      "([0-9.e+-]+), \"bus_bw\": ([0-9.e+-]+), \"wrong\": ([0-9]+)\\}");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(results[i], m, fields)) << results[i];
    EXPECT_EQ(std::stoull(m[1]), rows[i].bytes);
    EXPECT_EQ(std::stoull(m[2]), rows[i].count);
    EXPECT_NEAR(std::stod(m[3]), rows[i].oop.time, 0.0051 + 0.001 * rows[i].oop.time);
    EXPECT_NEAR(std::stod(m[5]), rows[i].oop.busbw, 0.0051 + 0.001 * rows[i].oop.busbw);
    EXPECT_EQ(std::stol(m[6]), rows[i].oop.wrong);
  }
  const std::string all = readFile(d + "/r.json");
  EXPECT_TRUE(has(all, "\"out_of_bounds\": {\"count\": 0, \"okay\": true}")) << all;

  // The plot: an SVG with one line per algorithm, each with a point per size.
  const std::string s = readFile(d + "/r.svg");
  EXPECT_EQ(s.rfind("<svg ", 0), 0u);
  EXPECT_TRUE(has(s, "</svg>"));
  const size_t lines = countOf(s, "<polyline"), points = countOf(s, "<circle");
  EXPECT_EQ(lines, 2u);
  EXPECT_EQ(points, 6u);
  EXPECT_TRUE(has(s, ">ring float sum<")) << s;
  run("rm -rf " + d);
}

TEST(LoomPlot, DrawsTablesAndRefusesForeignText) {
  char dir[] = "/tmp/loom-plot-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  ASSERT_EQ(run(perf() + " allreduce -t 2 -b 1K -e 1M -f 4 -n 2 > " + d + "/a.txt").status, 0);
  ASSERT_EQ(run(perf() + " alltoall -t 2 -b 1K -e 1M -f 4 -n 2 > " + d + "/b.txt").status, 0);
  const std::string plot = envPath("LOOM_PLOT");
  Result r = run(plot + " -o " + d + "/p.svg --title T --mode ip a=" + d + "/a.txt b=" + d + "/b.txt");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "b.txt: no ip rows")) << r.out;  // alltoall has no in-place column
  const std::string s = readFile(d + "/p.svg");
  EXPECT_TRUE(has(s, ">a<"));
  EXPECT_TRUE(has(s, ">T<"));
  const size_t lines = countOf(s, "<polyline"), points = countOf(s, "<circle");
  EXPECT_EQ(lines, 2u);
  EXPECT_EQ(points, 6u) << "a point per size of a.txt, none of b.txt";
  std::ofstream(d + "/junk.txt") << "hello world\n";
  r = run(plot + " -o " + d + "/q.svg x=" + d + "/junk.txt");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "line 1 is not a table row")) << r.out;
  run("rm -rf " + d);
}

// ---- Launchers --------------------------------------------------------------------------

// Two ranks started by hand with one launcher's variables, as torchrun and srun would set them.
// A 30 s init timeout: a rank whose peer failed reports it before run()'s 120 s deadline.
Result twoRanksWith(const std::string& rankVar, const std::string& sizeVar, const std::string& extra) {
  const int port = loomtest::freePort();
  if (port == 0) return Result{-1, "no free port on 127.0.0.1"};
  const std::string rank1Out = ::testing::TempDir() + "loom_perf_test_rank1_" + std::to_string(getpid());
  auto rank = [&](int r) {
    return rankVar + "=" + std::to_string(r) + " " + sizeVar + "=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
           std::to_string(port) + " LOOM_INIT_TIMEOUT_MS=30000 " + extra + " " + perf() +
           " allreduce -b 1K -e 4K -f 4 -n 2";
  };
  // Rank 0 prints the table; rank 1's output is shown only if a rank fails. The status is 0
  // only if both ranks exit 0.
  return run(rank(0) + " & " + rank(1) + " > " + rank1Out + " 2>&1; one=$?; wait $!; zero=$?; " +
             "[ $((zero | one)) -eq 0 ] || { echo \"rank 1 (exit $one):\"; cat " + rank1Out + "; }; rm -f " +
             rank1Out + "; exit $((zero | one))");
}

TEST(Launchers, TorchrunVariables) {
  const Result r = twoRanksWith("RANK", "WORLD_SIZE", "LOCAL_RANK=0");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Rank  1 Group")) << r.out;
  EXPECT_TRUE(has(r.out, "# Out of bounds values : 0 OK")) << r.out;
}

TEST(Launchers, SlurmVariables) {
  const Result r = twoRanksWith("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID=0");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "# Out of bounds values : 0 OK")) << r.out;
}

TEST(Launchers, Mpirun) {
  if (run("command -v mpirun").status != 0) GTEST_SKIP() << "skipped: mpirun is not installed";
  const int port = loomtest::freePort();
  ASSERT_NE(port, 0) << "no free port on 127.0.0.1";
  // Root (CI, containers) needs Open MPI's consent; tests/run.sh gives it, a bare `meson test` may not.
  const Result r = run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                       "mpirun --oversubscribe -n 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" + std::to_string(port) +
                       " -x LOOM_INIT_TIMEOUT_MS=30000 " + perf() + " broadcast -b 1K -e 4K -f 4 -n 2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Rank  1 Group")) << r.out;
  EXPECT_TRUE(has(r.out, "# Out of bounds values : 0 OK")) << r.out;
}

// --calibrate: a tuning file that Loom and loom-topo load; the 2 MiB "past the cache" calls
// (LOOM_STREAMING_MIN_BYTES=1 MiB) keep it quick.
TEST(Calibrate, WritesATuningFileThatLoads) {
  const std::string file = ::testing::TempDir() + "loom_perf_test_tuning_" + std::to_string(getpid()) + ".txt";
  const Result r = run("LOOM_STREAMING_MIN_BYTES=1048576 " + loomrun(2) + perf() + " --calibrate " + file);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "intra exchange")) << r.out;
  EXPECT_TRUE(has(r.out, "inter: one host, kept built in")) << r.out;
  EXPECT_TRUE(has(r.out, "ring allreduce 2 MiB, streaming")) << r.out;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_TRUE(has(r.out, "copy, reduce, streaming: a sanitized build, kept built in")) << r.out;
#else
  EXPECT_TRUE(has(r.out, "copy, reduce, streaming: machine calibration ")) << r.out;
#endif
  const Result text = run("cat " + file);
  for (const char* key : {"intra.latency_us = ", "intra.gbps = ", "reduce.gbps = ", "copy.gbps = ",
                          "oneshot.latency_us = ", "mem.gbps = ", "streaming.gbps = ",
                          "streaming.min_bytes = 1048576\n"}) {
    EXPECT_TRUE(has(text.out, key)) << key << "\n" << text.out;
  }
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_TRUE(has(r.out, "chunk.bytes, shm.fifo_bytes, socket.sndbuf: a sanitized build, not measured")) << r.out;
  EXPECT_TRUE(has(r.out, "direct reads: a sanitized build, not measured")) << r.out;
  EXPECT_FALSE(has(text.out, "chunk.bytes")) << text.out;
  EXPECT_FALSE(has(text.out, "shm.direct_min_bytes")) << text.out;
#else
  // Every candidate size timed against the built-in one, at 64 KiB, 512 KiB and 2 MiB.
  EXPECT_TRUE(has(text.out, "chunk.bytes = ")) << text.out;
  EXPECT_TRUE(has(text.out, "shm.fifo_bytes = ")) << text.out;
  EXPECT_TRUE(has(r.out, "chunk.bytes 512 KiB: 1.000 of the built-in's time (64 KiB ")) << r.out;
  EXPECT_TRUE(has(r.out, "shm.fifo_bytes 4 MiB: ")) << r.out;
  EXPECT_TRUE(has(r.out, "socket.sndbuf: no Loom sockets between these ranks, not measured")) << r.out;
  EXPECT_FALSE(has(text.out, "socket.sndbuf")) << text.out;
  // Direct reads between the two processes timed against the FIFO at 1, 2 and 4 MiB.
  EXPECT_TRUE(has(r.out, "fifo exchange 4194304 B: ")) << r.out;
  EXPECT_TRUE(has(r.out, "direct exchange 4194304 B: ")) << r.out;
  EXPECT_TRUE(has(r.out, "direct reads between processes: ")) << r.out;
  EXPECT_TRUE(has(text.out, "shm.direct_min_bytes = 0\n") || has(text.out, "shm.direct_min_bytes = 524288\n"))
      << text.out;
#endif
  const Result predicted = run("LOOM_TUNING_FILE=" + file + " " + envPath("LOOM_TOPO") +
                               " --predict allreduce --ranks 2");
  EXPECT_EQ(predicted.status, 0) << predicted.out;
  EXPECT_TRUE(has(predicted.out, "LOOM_TUNING_FILE (" + file + "): intra.latency_us = ")) << predicted.out;
  // A sweep under the calibrated constants runs and checks out.
  const Result tuned = run("LOOM_TUNING_FILE=" + file + " " + loomrun(2) + perf() + " allreduce -b 8 -e 64K -f 64 -n 2");
  EXPECT_EQ(tuned.status, 0) << tuned.out;
  EXPECT_TRUE(has(tuned.out, "# Out of bounds values : 0 OK")) << tuned.out;
  std::remove(file.c_str());
}

// Over sockets alone the send buffer is measured and the FIFO is not; Loom takes both sizes
// from the file.
TEST(Calibrate, MeasuresTheSocketSendBufferWhereSocketsCarry) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitized build measures no data-path sizes (checked above); the plain build runs this";
#endif
  const std::string file = ::testing::TempDir() + "loom_perf_test_socket_tuning_" + std::to_string(getpid()) + ".txt";
  const Result r =
      run("LOOM_TRANSPORTS=socket LOOM_STREAMING_MIN_BYTES=1048576 " + loomrun(2) + perf() + " --calibrate " + file);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "socket.sndbuf 0: ")) << r.out;
  EXPECT_TRUE(has(r.out, "socket.sndbuf 1 MiB: ")) << r.out;
  EXPECT_TRUE(has(r.out, "shm.fifo_bytes: no shared memory between these ranks, not measured")) << r.out;
  const Result text = run("cat " + file);
  EXPECT_TRUE(has(text.out, "chunk.bytes = ")) << text.out;
  EXPECT_TRUE(has(text.out, "socket.sndbuf = ")) << text.out;
  EXPECT_FALSE(has(text.out, "shm.fifo_bytes")) << text.out;
  const Result tuned = run("LOOM_TRANSPORTS=socket LOOM_TUNING_FILE=" + file + " " + loomrun(2) + perf() +
                           " allreduce -b 8 -e 1M -f 64 -n 2");
  EXPECT_EQ(tuned.status, 0) << tuned.out;
  EXPECT_TRUE(has(tuned.out, "# Out of bounds values : 0 OK")) << tuned.out;
  std::remove(file.c_str());
}

// --calibrate --device cuda on the CPU emulation: every device constant solved from its call
// and written under its device.* key (and no host key), which loom-topo's device prediction
// then takes. The figures are CPU threads'; a GPU session runs the same on the GPU.
TEST(Calibrate, DeviceConstantsOnTheEmulation) {
  const std::string file = ::testing::TempDir() + "loom_perf_test_device_tuning_" + std::to_string(getpid()) + ".txt";
  const Result r = run("LOOM_DEVICE_EMULATION=1 " + loomrun(2) + perf() + " --calibrate " + file + " --device cuda");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* line : {"2 ranks on the CPU emulation", "one rank, allreduce 4096 KiB out of place: ",
                           "ring allreduce 8 B, simple: ", "ring allgather 4096 KiB, simple: ",
                           "ring allreduce 4096 KiB, simple: ", "ring allreduce 64 KiB, ll: "}) {
    EXPECT_TRUE(has(r.out, line)) << line << "\n" << r.out;
  }
  std::ifstream in(file);
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("machine = ", 0) == 0) continue;
    const size_t eq = line.find(" = ");
    ASSERT_NE(eq, std::string::npos) << line;
    keys.push_back(line.substr(0, eq));
    const double value = std::stod(line.substr(eq + 3));
    const bool latency = keys.back().find("latency") != std::string::npos;
    EXPECT_TRUE(latency ? value >= 0 : value > 0) << line;
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"device.simple.latency_us", "device.simple.gbps", "device.ll.latency_us",
                                            "device.ll.gbps", "device.copy.gbps", "device.reduce.gbps"}));
  const Result predicted = run("LOOM_TUNING_FILE=" + file + " " + envPath("LOOM_TOPO") +
                               " --predict allreduce --ranks 2 --device");
  EXPECT_EQ(predicted.status, 0) << predicted.out;
  EXPECT_TRUE(has(predicted.out, "a device communicator, constants: LOOM_TUNING_FILE (" + file +
                                     "): device.simple.latency_us = "))
      << predicted.out;
  // Without the emulation a Loom without a CUDA device says so.
  const Result noDevice = run(loomrun(2) + perf() + " --calibrate " + file + " --device cuda");
  if (run("command -v nvidia-smi >/dev/null && nvidia-smi -L | grep -q GPU").status != 0) {
    EXPECT_NE(noDevice.status, 0) << noDevice.out;
    EXPECT_TRUE(has(noDevice.out, "--device cuda: ")) << noDevice.out;
  }
  std::remove(file.c_str());
}

TEST(Calibrate, RefusesWhatItCannotMeasure) {
  Result r = run(perf() + " --calibrate /tmp/unused allreduce");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "it runs no collective sweep")) << r.out;
  r = run(perf() + " --calibrate /tmp/unused -t 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "one rank per process")) << r.out;
  r = run(perf() + " --calibrate /tmp/unused");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "needs two or more processes")) << r.out;
  r = run(loomrun(2) + perf() + " --calibrate /nonexistent/dir/tuning.txt");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.out, "/nonexistent/dir/tuning.txt")) << r.out;
}

TEST(TuningFile, ABadFileFailsCommunicatorCreationSayingWhere) {
  const std::string file = ::testing::TempDir() + "loom_perf_test_bad_tuning_" + std::to_string(getpid()) + ".txt";
  std::ofstream(file) << "intra.gbps = fast\n";
  const Result r = run("LOOM_TUNING_FILE=" + file + " " + loomrun(2) + perf() + " allreduce -b 8 -e 8 -n 1");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.out, file + ":1: intra.gbps = \"fast\" is not a number")) << r.out;
  // A size the data path cannot take, as its variable could not.
  std::ofstream(file) << "chunk.bytes = 100\n";
  const Result small = run("LOOM_TUNING_FILE=" + file + " " + loomrun(2) + perf() + " allreduce -b 8 -e 8 -n 1");
  EXPECT_NE(small.status, 0);
  EXPECT_TRUE(has(small.out, "tuning file " + file + ": chunk.bytes = 100 is out of range [4096, 1073741824] (as "
                                                     "LOOM_CHUNK_SIZE)"))
      << small.out;
  std::remove(file.c_str());
}

}  // namespace
