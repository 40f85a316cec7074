// Black-box tests of the loomrun launcher: they run the binary named by $LOOMRUN on small
// /bin/sh ranks and check what the ranks saw, what loomrun printed and how it exited.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

constexpr double kRunLimitSeconds = 20;

struct RunResult {
  int exitCode = -1;  // 128 + N if loomrun itself died of signal N
  std::string out;
  std::string err;
  double seconds = 0;
};

std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> sortedLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// The LOOM_* variables in the output of `env`.
Env parseLoomEnv(const std::string& text) {
  Env env;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (line.rfind("LOOM_", 0) == 0 && eq != std::string::npos) {
      env[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return env;
}

bool waitForFile(const fs::path& path, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!fs::exists(path)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Gone or a zombie: either way no longer running.
bool processGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

class LoomrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* loomrun = std::getenv("LOOMRUN");
    ASSERT_NE(loomrun, nullptr) << "set LOOMRUN to the loomrun binary (meson test does)";
    loomrun_ = loomrun;
    std::string pattern = (fs::temp_directory_path() / "loomrun_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }

  void TearDown() override {
    if (pid_ > 0) {  // a test failed while loomrun was still running
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Starts loomrun with `args` in an environment without any inherited LOOM_* launcher
  // variable, plus TESTDIR (this test's scratch dir) and `extraEnv`.
  void start(const std::vector<std::string>& args, const Env& extraEnv = {}) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      if (entry.rfind("LOOM_", 0) == 0 || entry.rfind("TESTDIR=", 0) == 0) continue;
      env.push_back(entry);
    }
    env.push_back("TESTDIR=" + dir_.string());
    for (const auto& [name, value] : extraEnv) env.push_back(name + "=" + value);

    std::vector<std::string> argv{loomrun_};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> argvp, envp;
    for (std::string& a : argv) argvp.push_back(a.data());
    for (std::string& e : env) envp.push_back(e.data());
    argvp.push_back(nullptr);
    envp.push_back(nullptr);
    std::string outPath = (dir_ / "loomrun.out").string();
    std::string errPath = (dir_ / "loomrun.err").string();

    started_ = Clock::now();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0) << std::strerror(errno);
    if (pid_ == 0) {
      if (!std::freopen(outPath.c_str(), "w", stdout) ||
          !std::freopen(errPath.c_str(), "w", stderr)) {
        ::_exit(99);
      }
      ::execve(argvp[0], argvp.data(), envp.data());
      ::_exit(98);
    }
  }

  // Waits for the loomrun started by start(); kills it after kRunLimitSeconds.
  RunResult finish() {
    RunResult result;
    int status = 0;
    auto deadline = started_ + std::chrono::duration<double>(kRunLimitSeconds);
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "loomrun still running after " << kRunLimitSeconds << " s; killed";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    result.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    result.exitCode = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    result.out = readFile(dir_ / "loomrun.out");
    result.err = readFile(dir_ / "loomrun.err");
    return result;
  }

  RunResult run(const std::vector<std::string>& args, const Env& extraEnv = {}) {
    start(args, extraEnv);
    return finish();
  }

  // Runs `ranks` ranks of a shell script that saves its environment, and returns what each
  // global rank saw, by rank.
  std::map<int, Env> runEnvDump(const std::vector<std::string>& options, const Env& extraEnv,
                                RunResult* result) {
    std::vector<std::string> args = options;
    args.insert(args.end(), {"sh", "-c", "env > \"$TESTDIR/env.$LOOM_RANK\""});
    *result = run(args, extraEnv);
    std::map<int, Env> byRank;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      std::string name = entry.path().filename().string();
      if (name.rfind("env.", 0) != 0) continue;
      byRank[std::stoi(name.substr(4))] = parseLoomEnv(readFile(entry.path()));
    }
    return byRank;
  }

  std::string loomrun_;
  fs::path dir_;
  pid_t pid_ = -1;
  Clock::time_point started_;
};

const std::regex kSecretFormat("[0-9a-f]{32}");

TEST_F(LoomrunTest, SingleNodeRanksGetTheirEnvironment) {
  RunResult result;
  std::map<int, Env> seen = runEnvDump({"-n", "3"}, {}, &result);
  EXPECT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(result.err, "");
  ASSERT_EQ(seen.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    Env& env = seen[rank];
    EXPECT_EQ(env["LOOM_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOOM_LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOOM_WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOOM_LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOOM_NODE_RANK"], "0");
    EXPECT_EQ(env["LOOM_NNODES"], "1");
    EXPECT_EQ(env["LOOM_MASTER_ADDR"], "127.0.0.1");
    int port = std::atoi(env["LOOM_MASTER_PORT"].c_str());
    EXPECT_GT(port, 0);
    EXPECT_LE(port, 65535);
    EXPECT_TRUE(std::regex_match(env["LOOM_SECRET"], kSecretFormat)) << env["LOOM_SECRET"];
    // One job, one rendezvous point and one secret.
    EXPECT_EQ(env["LOOM_MASTER_PORT"], seen[0]["LOOM_MASTER_PORT"]);
    EXPECT_EQ(env["LOOM_SECRET"], seen[0]["LOOM_SECRET"]);
  }
}

TEST_F(LoomrunTest, EachJobGetsAFreshSecret) {
  RunResult first = run({"-n", "1", "sh", "-c", "printf %s \"$LOOM_SECRET\""});
  RunResult second = run({"-n", "1", "sh", "-c", "printf %s \"$LOOM_SECRET\""});
  EXPECT_TRUE(std::regex_match(first.out, kSecretFormat)) << first.out;
  EXPECT_TRUE(std::regex_match(second.out, kSecretFormat)) << second.out;
  EXPECT_NE(first.out, second.out);
}

TEST_F(LoomrunTest, PresetSecretAndMasterPassThrough) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  RunResult result;
  std::map<int, Env> seen = runEnvDump(
      {"-n", "2", "--master-addr", "127.0.0.1", "--master-port", "29511"},
      {{"LOOM_SECRET", secret}}, &result);
  EXPECT_EQ(result.exitCode, 0) << result.err;
  ASSERT_EQ(seen.size(), 2u);
  for (auto& [rank, env] : seen) {
    EXPECT_EQ(env["LOOM_SECRET"], secret) << "rank " << rank;
    EXPECT_EQ(env["LOOM_MASTER_PORT"], "29511") << "rank " << rank;
  }
}

TEST_F(LoomrunTest, MultiNodeNumberingAndSecretWarning) {
  RunResult result;
  std::map<int, Env> seen = runEnvDump({"-n", "6", "--nnodes", "3", "--node-rank", "1",
                                        "--master-addr", "10.0.0.1", "--master-port", "29500"},
                                       {}, &result);
  EXPECT_EQ(result.exitCode, 0) << result.err;
  ASSERT_EQ(seen.size(), 2u);
  for (int local = 0; local < 2; ++local) {
    int rank = 2 + local;
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(seen.count(rank), 1u);
    Env& env = seen[rank];
    EXPECT_EQ(env["LOOM_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOOM_LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(env["LOOM_WORLD_SIZE"], "6");
    EXPECT_EQ(env["LOOM_LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["LOOM_NODE_RANK"], "1");
    EXPECT_EQ(env["LOOM_NNODES"], "3");
    EXPECT_EQ(env["LOOM_MASTER_ADDR"], "10.0.0.1");
    EXPECT_EQ(env["LOOM_MASTER_PORT"], "29500");
    // Every node would invent a different one, so none is invented.
    EXPECT_EQ(env.count("LOOM_SECRET"), 0u);
  }
  EXPECT_NE(result.err.find("warning: LOOM_SECRET is not set"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("authenticates nothing"), std::string::npos) << result.err;
}

TEST_F(LoomrunTest, MultiNodeWithSecretDoesNotWarn) {
  const std::string secret = "fedcba9876543210fedcba9876543210";
  RunResult result;
  std::map<int, Env> seen = runEnvDump({"-n", "2", "--nnodes", "2", "--node-rank", "0",
                                        "--master-addr", "10.0.0.1", "--master-port", "29500"},
                                       {{"LOOM_SECRET", secret}}, &result);
  EXPECT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(result.err, "");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["LOOM_SECRET"], secret);
}

TEST_F(LoomrunTest, FailingRankStopsTheOthersAndGivesItsStatus) {
  RunResult result = run({"-n", "3", "sh", "-c",
                          "if [ \"$LOOM_RANK\" = 1 ]; then sleep 0.2; exit 3; fi; sleep 60"});
  EXPECT_EQ(result.exitCode, 3) << result.err;
  EXPECT_LT(result.seconds, 10);
  EXPECT_NE(result.err.find("loomrun: rank 1 exited with status 3"), std::string::npos)
      << result.err;
}

TEST_F(LoomrunTest, RankKilledBySignalGives128PlusSignal) {
  RunResult result = run({"-n", "2", "sh", "-c",
                          "if [ \"$LOOM_RANK\" = 0 ]; then kill -USR1 $$; fi; sleep 60"});
  EXPECT_EQ(result.exitCode, 128 + SIGUSR1) << result.err;
  EXPECT_LT(result.seconds, 10);
  EXPECT_NE(result.err.find("loomrun: rank 0 was killed by signal SIGUSR1"), std::string::npos)
      << result.err;
}

TEST_F(LoomrunTest, StopReachesWhatTheRankStarted) {
  // Rank 0's shell leaves a background sleep; stopping rank 0 must stop the sleep too.
  RunResult result = run({"-n", "2", "--tag-output", "sh", "-c",
                          "if [ \"$LOOM_RANK\" = 1 ]; then sleep 0.2; exit 1; fi; "
                          "sleep 60 & echo $! > \"$TESTDIR/child.pid\"; wait"});
  EXPECT_EQ(result.exitCode, 1) << result.err;
  EXPECT_LT(result.seconds, 10);
  pid_t child = std::atoi(readFile(dir_ / "child.pid").c_str());
  ASSERT_GT(child, 0);
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (!processGone(child) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(processGone(child)) << "the rank's background sleep " << child << " survived";
}

TEST_F(LoomrunTest, RankIgnoringSigtermIsKilledAfterTheGrace) {
  RunResult result = run({"-n", "2", "sh", "-c",
                          "if [ \"$LOOM_RANK\" = 1 ]; then sleep 0.2; exit 5; fi; "
                          "trap '' TERM; sleep 60"});
  EXPECT_EQ(result.exitCode, 5) << result.err;
  EXPECT_GE(result.seconds, 2.5);  // the 3 s grace
  EXPECT_LT(result.seconds, 10);
}

TEST_F(LoomrunTest, TimeoutStopsTheJobWith124) {
  RunResult result = run({"--timeout", "1", "-n", "2", "sleep", "30"});
  EXPECT_EQ(result.exitCode, 124) << result.err;
  EXPECT_GE(result.seconds, 0.9);
  EXPECT_LT(result.seconds, 6);
  EXPECT_NE(result.err.find("loomrun: timeout after 1 s; ranks still running: 0,1"),
            std::string::npos)
      << result.err;
}

TEST_F(LoomrunTest, TagOutputPrefixesEveryLine) {
  RunResult result = run({"--tag-output", "-n", "2", "sh", "-c",
                          "echo hello; echo oops >&2; printf 'two\\nlines\\npartial'"});
  EXPECT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(sortedLines(result.out),
            (std::vector<std::string>{"[0] hello", "[0] lines", "[0] partial", "[0] two",
                                      "[1] hello", "[1] lines", "[1] partial", "[1] two"}));
  EXPECT_EQ(sortedLines(result.err), (std::vector<std::string>{"[0] oops", "[1] oops"}));
}

TEST_F(LoomrunTest, WithoutTagOutputRanksWriteDirectly) {
  RunResult result = run({"-n", "2", "sh", "-c", "echo hello; echo oops >&2"});
  EXPECT_EQ(result.exitCode, 0) << result.err;
  EXPECT_EQ(result.out, "hello\nhello\n");
  EXPECT_EQ(result.err, "oops\noops\n");
}

TEST_F(LoomrunTest, SigtermIsForwardedToEveryRank) {
  start({"-n", "2", "sh", "-c",
         "trap 'echo term > \"$TESTDIR/marker.$LOOM_RANK\"; exit 0' TERM; "
         "sleep 60 & touch \"$TESTDIR/ready.$LOOM_RANK\"; wait"});
  ASSERT_TRUE(waitForFile(dir_ / "ready.0", 10));
  ASSERT_TRUE(waitForFile(dir_ / "ready.1", 10));
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  RunResult result = finish();
  EXPECT_EQ(readFile(dir_ / "marker.0"), "term\n");
  EXPECT_EQ(readFile(dir_ / "marker.1"), "term\n");
  // The ranks exited 0, but the job was interrupted: the shell's 128 + SIGTERM.
  EXPECT_EQ(result.exitCode, 128 + SIGTERM) << result.err;
  EXPECT_LT(result.seconds, 10);
  EXPECT_NE(result.err.find("received SIGTERM"), std::string::npos) << result.err;
}

TEST_F(LoomrunTest, ProgramThatCannotRunGives127) {
  RunResult result = run({"-n", "2", "/nonexistent/loomrun-test-program"});
  EXPECT_EQ(result.exitCode, 127);
  EXPECT_NE(result.err.find("loomrun: cannot run '/nonexistent/loomrun-test-program': "
                            "No such file or directory"),
            std::string::npos)
      << result.err;
}

TEST_F(LoomrunTest, HelpGoesToStdout) {
  RunResult result = run({"--help"});
  EXPECT_EQ(result.exitCode, 0);
  EXPECT_NE(result.out.find("usage: loomrun"), std::string::npos);
  EXPECT_EQ(result.err, "");
}

struct BadArguments {
  const char* name;
  std::vector<std::string> args;
  const char* message;  // must appear on stderr
};

class LoomrunBadArgumentsTest : public LoomrunTest,
                                public ::testing::WithParamInterface<BadArguments> {};

TEST_P(LoomrunBadArgumentsTest, ExitsWith2AndSaysWhy) {
  RunResult result = run(GetParam().args);
  EXPECT_EQ(result.exitCode, 2);
  EXPECT_NE(result.err.find(GetParam().message), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("usage: loomrun"), std::string::npos) << result.err;
  EXPECT_EQ(result.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    Arguments, LoomrunBadArgumentsTest,
    ::testing::Values(
        BadArguments{"MissingNproc", {"true"}, "-n/--nproc is required"},
        BadArguments{"MissingProgram", {"-n", "2"}, "no program to run"},
        BadArguments{"UnknownOption", {"--bogus", "-n", "2", "true"}, "unknown option '--bogus'"},
        BadArguments{"NotANumber", {"-n", "two", "true"}, "-n needs a positive number"},
        BadArguments{"NnodesNotDividingN",
                     {"-n", "3", "--nnodes", "2", "--master-addr", "h", "--master-port", "1",
                      "true"},
                     "-n 3 is not divisible by --nnodes 2"},
        BadArguments{"NodeRankOutOfRange",
                     {"-n", "4", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h",
                      "--master-port", "1", "true"},
                     "--node-rank 2 is out of range"},
        BadArguments{"MultiNodeWithoutMasterAddr",
                     {"-n", "4", "--nnodes", "2", "--master-port", "29500", "true"},
                     "--master-addr is required"},
        BadArguments{"MultiNodeWithoutMasterPort",
                     {"-n", "4", "--nnodes", "2", "--master-addr", "10.0.0.1", "true"},
                     "--master-port is required"},
        BadArguments{"BadTimeout", {"--timeout", "0", "-n", "1", "true"}, "--timeout needs"}),
    [](const ::testing::TestParamInfo<BadArguments>& info) { return info.param.name; });

}  // namespace
