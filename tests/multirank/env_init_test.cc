// loomCommInitFromEnv under each launcher's variables (one at a time, and the whole set each
// launcher really sets, nested launchers included), its errors, and the whole path through
// loomrun with the README's example.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdlib.h>
#include <string>
#include <tuple>
#include <vector>

#include "multirank/harness.h"

namespace {

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* addr;  // nullptr: the launcher sets none, LOOM_MASTER_ADDR is needed
  const char* port;
};

const Launcher kLaunchers[] = {
    {"loomrun", "LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_MASTER_ADDR", "LOOM_MASTER_PORT"},
    {"torchrun", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr, nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", nullptr, nullptr},
};

const char* const kAllVariables[] = {
    "LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK", "LOOM_MASTER_ADDR", "LOOM_MASTER_PORT",
    "LOOM_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "TORCHELASTIC_USE_AGENT_STORE"};

void clearLaunchEnvironment() {
  for (const char* v : kAllVariables) ::unsetenv(v);
}

loomConfig_t shortConfig() {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = 20000;
  config.initTimeoutMs = 20000;
  return config;
}

// One rank's loomCommInitFromEnv under the environment already set: it must be rank `rank`
// of `n`, and the communicator must carry a barrier. `label` names the launcher in failures.
void initFromEnvAndCheck(int rank, int n, const std::string& label) {
  loomConfig_t config = shortConfig();
  loomComm_t comm = nullptr;
  LOOM_ASSERT_OK(loomCommInitFromEnv(&comm, &config), nullptr);
  int me = -1, count = 0;
  LOOM_EXPECT_OK(loomCommUserRank(comm, &me), comm);
  LOOM_EXPECT_OK(loomCommCount(comm, &count), comm);
  EXPECT_EQ(me, rank) << label;
  EXPECT_EQ(count, n) << label;
  LOOM_EXPECT_OK(loomBarrier(comm, nullptr), comm);
  LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
}

class EnvInitTest : public testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(EnvInitTest, RanksFormACommunicator) {
  const Launcher& launcher = kLaunchers[std::get<0>(GetParam())];
  bool withSecret = std::get<1>(GetParam());
  const int n = 3;
  int port = loomtest::freePort();
  loomtest::runProcesses(n, [&](int rank) {
    clearLaunchEnvironment();
    ::setenv(launcher.rank, std::to_string(rank).c_str(), 1);
    ::setenv(launcher.size, std::to_string(n).c_str(), 1);
    ::setenv(launcher.addr ? launcher.addr : "LOOM_MASTER_ADDR", "127.0.0.1", 1);
    ::setenv(launcher.port ? launcher.port : "LOOM_MASTER_PORT", std::to_string(port).c_str(), 1);
    if (withSecret) ::setenv("LOOM_SECRET", "00112233445566778899aabbccddeeff", 1);
    initFromEnvAndCheck(rank, n, launcher.name);
  });
}

INSTANTIATE_TEST_SUITE_P(Launchers, EnvInitTest,
                         testing::Combine(testing::Range(0, 4), testing::Bool()),
                         [](const auto& info) {
                           return std::string(kLaunchers[std::get<0>(info.param)].name) +
                                  (std::get<1>(info.param) ? "_LOOM_SECRET" : "_derived_secret");
                         });

// The whole environment a launcher gives a rank (docs/LAUNCH.md), as the launcher's own code
// or documentation has it: torch 1.13's local_elastic_agent.py, Open MPI 4.1's and Slurm's
// manuals, Kubeflow's training and MPI operators. Two ranks on this host; `port` is where the
// job's rendezvous is (MASTER_PORT).
using Variables = std::vector<std::pair<std::string, std::string>>;

struct RealLaunch {
  const char* name;
  std::function<Variables(int rank, int port)> variables;
  bool agentStoreHoldsPort;  // torchrun's static rendezvous: its TCPStore listens on MASTER_PORT
};

Variables torchrunVariables(int rank, int port, const char* useAgentStore) {
  const std::string r = std::to_string(rank);
  return {{"LOCAL_RANK", r}, {"RANK", r}, {"GROUP_RANK", "0"}, {"ROLE_RANK", r},
          {"ROLE_NAME", "default"}, {"LOCAL_WORLD_SIZE", "2"}, {"WORLD_SIZE", "2"},
          {"GROUP_WORLD_SIZE", "1"}, {"ROLE_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}, {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_RUN_ID", "none"},
          {"TORCHELASTIC_USE_AGENT_STORE", useAgentStore}, {"NCCL_ASYNC_ERROR_HANDLING", "1"},
          {"OMP_NUM_THREADS", "1"}};
}

Variables openMpiVariables(int rank, int port) {
  const std::string r = std::to_string(rank);
  return {{"OMPI_COMM_WORLD_RANK", r}, {"OMPI_COMM_WORLD_SIZE", "2"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", r}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", r}, {"OMPI_UNIVERSE_SIZE", "2"}, {"OMPI_FIRST_RANKS", "0"},
          {"OMPI_MCA_orte_ess_num_procs", "2"}, {"PMIX_RANK", r}, {"PMIX_NAMESPACE", "prterun-node1-4242@1"},
          // what `mpirun -x MASTER_ADDR -x MASTER_PORT` passes on
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
}

Variables slurmStepVariables(int procid, int ntasks, int port) {
  const std::string r = std::to_string(procid);
  return {{"SLURM_PROCID", r}, {"SLURM_NTASKS", std::to_string(ntasks)}, {"SLURM_NPROCS", std::to_string(ntasks)},
          {"SLURM_LOCALID", r}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"}, {"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "node1"}, {"SLURM_TASKS_PER_NODE", std::to_string(ntasks)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(ntasks)}, {"SLURM_CPUS_ON_NODE", "2"},
          // exported by the sbatch script (docs/LAUNCH.md); srun passes the environment on
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
}

Variables joined(Variables a, const Variables& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const RealLaunch kRealLaunches[] = {
    {"torchrun_static_rendezvous", [](int r, int p) { return torchrunVariables(r, p, "True"); }, true},
    {"torchrun_c10d_rendezvous", [](int r, int p) { return torchrunVariables(r, p, "False"); }, false},
    {"kubeflow_pytorchjob",
     [](int r, int p) {
       return Variables{{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(p)}, {"WORLD_SIZE", "2"},
                        {"RANK", std::to_string(r)}, {"PYTHONUNBUFFERED", "0"}};
     },
     false},
    {"mpirun", openMpiVariables, false},
    {"kubeflow_mpijob",
     [](int r, int p) {
       return joined(openMpiVariables(r, p), {{"OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"},
                                              {"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"},
                                              {"K_MPI_JOB_ROLE", "worker"}});
     },
     false},
    {"srun", [](int r, int p) { return slurmStepVariables(r, 2, p); }, false},
    // mpirun inside an sbatch script: both ranks carry the batch step's SLURM_PROCID=0; Open
    // MPI's own variables must win.
    {"mpirun_in_slurm_allocation",
     [](int r, int p) { return joined(slurmStepVariables(0, 2, p), openMpiVariables(r, p)); }, false},
    // srun starts one torchrun per node (one node here): Slurm says 1 task, torchrun 2 ranks.
    {"torchrun_under_srun",
     [](int r, int p) { return joined(slurmStepVariables(0, 1, p), torchrunVariables(r, p, "False")); }, false},
};

// Listens on 127.0.0.1:port while alive, as torchrun's agent store does.
class PortHolder {
 public:
  explicit PortHolder(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    listening_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 16) == 0;
  }
  ~PortHolder() { ::close(fd_); }
  PortHolder(const PortHolder&) = delete;
  PortHolder& operator=(const PortHolder&) = delete;
  bool listening() const { return listening_; }

 private:
  int fd_;
  bool listening_ = false;
};

class RealLaunchTest : public testing::TestWithParam<int> {};

TEST_P(RealLaunchTest, RanksFormACommunicator) {
  const RealLaunch& launch = kRealLaunches[GetParam()];
  // Loom's root listens on the port after the agent store's.
  const int port = loomtest::freePort(2);
  ASSERT_NE(port, 0) << "no two free ports in a row on 127.0.0.1";
  std::unique_ptr<PortHolder> agentStore;
  if (launch.agentStoreHoldsPort) {
    agentStore = std::make_unique<PortHolder>(port);
    ASSERT_TRUE(agentStore->listening()) << "cannot listen on 127.0.0.1:" << port;
  }
  loomtest::runProcesses(2, [&](int rank) {
    clearLaunchEnvironment();
    for (const auto& [name, value] : launch.variables(rank, port)) ::setenv(name.c_str(), value.c_str(), 1);
    initFromEnvAndCheck(rank, 2, launch.name);
  });
}

INSTANTIATE_TEST_SUITE_P(Launchers, RealLaunchTest,
                         testing::Range(0, static_cast<int>(sizeof(kRealLaunches) / sizeof(kRealLaunches[0]))),
                         [](const auto& info) { return std::string(kRealLaunches[info.param].name); });

// Runs loomCommInitFromEnv in a child with the given variables; returns its result and
// the message.
std::pair<loomResult_t, std::string> initWith(const std::vector<std::pair<const char*, const char*>>& vars) {
  clearLaunchEnvironment();
  for (auto& [k, v] : vars) ::setenv(k, v, 1);
  loomConfig_t config = shortConfig();
  config.initTimeoutMs = 1000;
  loomComm_t comm = nullptr;
  loomResult_t r = loomCommInitFromEnv(&comm, &config);
  std::string message = loomGetLastError(nullptr);
  if (comm != nullptr) loomCommDestroy(comm);
  clearLaunchEnvironment();
  return {r, message};
}

TEST(EnvInitErrors, EachMissingOrBadVariableIsNamed) {
  auto [r1, m1] = initWith({});
  EXPECT_EQ(r1, loomInvalidUsage);
  EXPECT_NE(m1.find("LOOM_RANK"), std::string::npos) << m1;

  auto [r2, m2] = initWith({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(r2, loomInvalidUsage);
  EXPECT_NE(m2.find("set LOOM_MASTER_ADDR"), std::string::npos) << m2;
  EXPECT_NE(m2.find("Open MPI"), std::string::npos) << m2;

  auto [r3, m3] = initWith({{"LOOM_RANK", "5"}, {"LOOM_WORLD_SIZE", "2"}, {"LOOM_MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(r3, loomInvalidArgument);
  EXPECT_NE(m3.find("LOOM_RANK=\"5\""), std::string::npos) << m3;

  auto [r4, m4] = initWith({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "1"},
                            {"LOOM_MASTER_ADDR", "127.0.0.1"}, {"LOOM_SECRET", "not-hex"}});
  EXPECT_EQ(r4, loomInvalidArgument);
  EXPECT_NE(m4.find("LOOM_SECRET must be 32 hex digits"), std::string::npos) << m4;

  auto [r5, m5] = initWith({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", "99999"}});
  EXPECT_EQ(r5, loomInvalidArgument);
  EXPECT_NE(m5.find("MASTER_PORT"), std::string::npos) << m5;

  auto [r8, m8] = initWith({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", "65535"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(r8, loomInvalidArgument);
  EXPECT_NE(m8.find("set LOOM_MASTER_PORT"), std::string::npos) << m8;

  {
    loomtest::ScopedEnv badSendBuffer("LOOM_SOCKET_SNDBUF", "-1");
    auto [r7, m7] = initWith({{"LOOM_RANK", "0"}, {"LOOM_WORLD_SIZE", "1"}, {"LOOM_MASTER_ADDR", "127.0.0.1"}});
    EXPECT_EQ(r7, loomInvalidArgument);
    EXPECT_NE(m7.find("LOOM_SOCKET_SNDBUF=-1"), std::string::npos) << m7;
  }

  // A rank other than 0 whose root never appears: a timeout, not a hang.
  std::string port = std::to_string(loomtest::freePort());
  auto [r6, m6] = initWith({{"LOOM_RANK", "1"}, {"LOOM_WORLD_SIZE", "2"},
                            {"LOOM_MASTER_ADDR", "127.0.0.1"}, {"LOOM_MASTER_PORT", port.c_str()}});
  EXPECT_EQ(r6, loomTimeout);
  EXPECT_NE(m6.find("127.0.0.1:" + port), std::string::npos) << m6;
}

// The README's command: loomrun starts the example on 4 ranks and all of them succeed.
TEST(Loomrun, RunsTheExampleRing) {
  const char* loomrun = std::getenv("LOOMRUN");
  const char* example = std::getenv("RING_HELLO");
  ASSERT_NE(loomrun, nullptr) << "LOOMRUN is set by meson";
  ASSERT_NE(example, nullptr) << "RING_HELLO is set by meson";
  std::string command = std::string(loomrun) + " -n 4 --timeout 60 --tag-output " + example + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  for (int r = 0; r < 4; ++r) {
    std::string line = "[" + std::to_string(r) + "] rank " + std::to_string(r) + " of 4 received " +
                       std::to_string((r + 3) % 4);
    EXPECT_NE(output.find(line), std::string::npos) << line << "\n" << output;
  }
}

// LOOM_DEBUG=INFO with LOOM_DEBUG_FILE: one file per process (%p), each line prefixed
// with host:pid:tid and the rank, and the decisions (sources, secret, comm) logged.
TEST(Logging, DebugFilePerProcessWithRankPrefix) {
  const char* loomrun = std::getenv("LOOMRUN");
  const char* example = std::getenv("RING_HELLO");
  ASSERT_NE(loomrun, nullptr);
  ASSERT_NE(example, nullptr);
  char dir[] = "/tmp/loom-log-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string command = std::string("LOOM_DEBUG=INFO LOOM_DEBUG_FILE=") + dir + "/log.%p " + loomrun +
                        " -n 2 --timeout 60 " + example + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::string all;
  int files = 0;
  FILE* ls = ::popen((std::string("cat ") + dir + "/log.* && ls " + dir + " | wc -l").c_str(), "r");
  ASSERT_NE(ls, nullptr);
  char buffer[1024];
  while (std::fgets(buffer, sizeof(buffer), ls) != nullptr) all += buffer;
  ::pclose(ls);
  files = std::atoi(all.substr(all.rfind('\n', all.size() - 2) + 1).c_str());
  EXPECT_EQ(files, 2) << all;
  EXPECT_NE(all.find("[0] LOOM INFO loomCommInitFromEnv: rank 0 of 2 from loomrun"), std::string::npos) << all;
  EXPECT_NE(all.find("[1] LOOM INFO comm "), std::string::npos) << all;
  EXPECT_NE(all.find("secret from LOOM_SECRET"), std::string::npos) << all;
  EXPECT_NE(all.find("built with cuda="), std::string::npos) << all;
  std::system((std::string("rm -rf ") + dir).c_str());
}

}  // namespace

namespace {

// Every rank's log of one run of ring_hello on 2 ranks under `env`, with LOOM_DEBUG=INFO.
std::string infoLogOfRun(const std::string& dir, const std::string& env) {
  const char* loomrun = std::getenv("LOOMRUN");
  const char* example = std::getenv("RING_HELLO");
  if (loomrun == nullptr || example == nullptr) {
    ADD_FAILURE() << "LOOMRUN and RING_HELLO are set by meson";
    return "";
  }
  std::system(("rm -f " + dir + "/log.*").c_str());
  const std::string command = env + " LOOM_DEBUG=INFO LOOM_DEBUG_FILE=" + dir + "/log.%p " + loomrun +
                              " -n 2 --timeout 60 " + example + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::string all;
  FILE* cat = ::popen(("cat " + dir + "/log.*").c_str(), "r");
  char buffer[4096];
  while (cat != nullptr && std::fgets(buffer, sizeof(buffer), cat) != nullptr) all += buffer;
  if (cat != nullptr) ::pclose(cat);
  return all;
}

}  // namespace

// The data-path sizes come from their variables, else LOOM_TUNING_FILE, else built in; every
// rank says which (the chunk is rank 0's everywhere), and the links are made with them.
TEST(Logging, DataPathSizesNameTheirSourcesAndTakeEffect) {
  char dir[] = "/tmp/loom-sizes-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string all = infoLogOfRun(dir, "LOOM_MACHINE_CALIBRATION=0");
  EXPECT_NE(all.find("[0] LOOM INFO comm "), std::string::npos) << all;
  EXPECT_NE(all.find(": data-path sizes: chunk 524288 bytes (built in), shm FIFO 1048576 bytes (built in), socket "
                     "send buffer 262144 bytes (built in), direct reads between processes never (built in)"),
            std::string::npos)
      << all;

  const std::string file = std::string(dir) + "/tuning.txt";
  FILE* tuning = std::fopen(file.c_str(), "w");
  ASSERT_NE(tuning, nullptr);
  std::fputs("# loom tuning file v1\nchunk.bytes = 262144\nshm.fifo_bytes = 2097152\nsocket.sndbuf = 131072\n"
             "shm.direct_min_bytes = 1048576\n",
             tuning);
  std::fclose(tuning);
  all = infoLogOfRun(dir, "LOOM_MACHINE_CALIBRATION=0 LOOM_TUNING_FILE=" + file + " LOOM_SOCKET_SNDBUF=65536");
  const std::string fromFile = "(LOOM_TUNING_FILE " + file + ")";
  EXPECT_NE(all.find(": data-path sizes: chunk 262144 bytes " + fromFile + ", shm FIFO 2097152 bytes " + fromFile +
                     ", socket send buffer 65536 bytes (LOOM_SOCKET_SNDBUF), direct reads between processes from "
                     "1048576 bytes " + fromFile),
            std::string::npos)
      << all;
  EXPECT_NE(all.find(": data-path sizes: chunk 262144 bytes (rank 0's), shm FIFO 2097152 bytes " + fromFile),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("shm: link with rank 1: FIFO of 2097152 bytes each way"), std::string::npos) << all;
  EXPECT_NE(all.find("sends of 1048576 bytes or more are read by the receiver straight from the sender's memory "
                     "(process_vm_readv)"),
            std::string::npos)
      << all;

  // The variable wins over the file.
  all = infoLogOfRun(dir, "LOOM_MACHINE_CALIBRATION=0 LOOM_TUNING_FILE=" + file +
                              " LOOM_CHUNK_SIZE=65536 LOOM_SHM_DIRECT=threads");
  EXPECT_NE(all.find(": data-path sizes: chunk 65536 bytes (LOOM_CHUNK_SIZE), shm FIFO 2097152 bytes " + fromFile),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("direct reads between processes never (LOOM_SHM_DIRECT)"), std::string::npos) << all;
  EXPECT_NE(all.find("all sends through it"), std::string::npos) << all;
  std::system((std::string("rm -rf ") + dir).c_str());
}

// Between processes, where neither LOOM_SHM_DIRECT nor a tuning file says, rank 0's machine
// calibration decides whether large sends are read straight from the sender's memory, for
// every rank and its links (its cache file edited here, so that the choice is known).
TEST(Logging, DirectReadsFollowRankZerosMachineCalibration) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitized build has no machine calibration; the plain build runs this";
#else
  char dir[] = "/tmp/loom-direct-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string cache = std::string(dir) + "/cache";
  const std::string xdg = "XDG_CACHE_HOME=" + cache;
  infoLogOfRun(dir, xdg);  // measures and writes the cache
  std::string file;
  FILE* ls = ::popen(("ls " + cache + "/loom/machine-*.txt").c_str(), "r");
  char line[512];
  if (ls != nullptr && std::fgets(line, sizeof line, ls) != nullptr) file = std::string(line, std::strcspn(line, "\n"));
  if (ls != nullptr) ::pclose(ls);
  ASSERT_FALSE(file.empty());
  auto setDirect = [&](const char* value) {
    const std::string sed = "sed -i 's/^shm.direct_min_bytes = .*/shm.direct_min_bytes = " + std::string(value) +
                            "/' " + file;
    ASSERT_EQ(std::system(sed.c_str()), 0);
  };
  setDirect("4096");
  std::string all = infoLogOfRun(dir, xdg);
  EXPECT_NE(all.find("direct reads between processes from 4096 bytes (machine calibration)"), std::string::npos)
      << all;
  EXPECT_NE(all.find("direct reads between processes from 4096 bytes (rank 0's machine calibration)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("sends of 4096 bytes or more are read by the receiver straight from the sender's memory"),
            std::string::npos)
      << all;
  // The variable wins.
  all = infoLogOfRun(dir, xdg + " LOOM_SHM_DIRECT=none");
  EXPECT_NE(all.find("direct reads between processes never (LOOM_SHM_DIRECT)"), std::string::npos) << all;
  EXPECT_NE(all.find("all sends through it"), std::string::npos) << all;
  setDirect("0");
  all = infoLogOfRun(dir, xdg);
  EXPECT_NE(all.find("direct reads between processes never (machine calibration)"), std::string::npos) << all;
  EXPECT_NE(all.find("all sends through it"), std::string::npos) << all;
  std::system((std::string("rm -rf ") + dir).c_str());
#endif
}

// Rank 0 says where each tuner constant came from: the machine calibration (measured at the
// first communicator, read from its cache file after), LOOM_TUNING_FILE and
// LOOM_STREAMING_MIN_BYTES over it key by key, built in for the rest.
TEST(Logging, TunerConstantsNameTheirSources) {
  char dir[] = "/tmp/loom-tuner-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string cache = std::string(dir) + "/cache";
  const std::string xdg = "XDG_CACHE_HOME=" + cache;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  std::string all = infoLogOfRun(dir, xdg);
  EXPECT_NE(all.find("no machine calibration in a sanitized build"), std::string::npos) << all;
  EXPECT_NE(all.find("[0] LOOM INFO comm "), std::string::npos) << all;
  EXPECT_NE(all.find("tuner constants: built in: intra.latency_us = 1.5"), std::string::npos) << all;
  std::printf("this sanitized build takes built-in constants; the calibration's sources were checked in the "
              "plain build\n");
#else
  std::string all = infoLogOfRun(dir, xdg);
  const std::string calibrated = "tuner constants: machine calibration (" + cache + "/loom/machine-";
  EXPECT_NE(all.find(calibrated), std::string::npos) << all;
  EXPECT_NE(all.find(".txt (measured now in "), std::string::npos) << all;
  // Two ranks on a host of two CPUs or more: the shared-memory link and the board too.
  EXPECT_NE(all.find("): intra.latency_us = "), std::string::npos) << all;
  EXPECT_NE(all.find(", oneshot.latency_us = "), std::string::npos) << all;
  EXPECT_NE(all.find("; built in: inter.latency_us = "), std::string::npos) << all;
  EXPECT_NE(all.find("[1] LOOM INFO comm "), std::string::npos) << all;
  EXPECT_NE(all.find("tuner constants (rank 0's): "), std::string::npos) << all;

  const std::string file = std::string(dir) + "/tuning.txt";
  FILE* tuning = std::fopen(file.c_str(), "w");
  ASSERT_NE(tuning, nullptr);
  std::fputs("reduce.gbps = 77\nintra.gbps = 3.5\n", tuning);
  std::fclose(tuning);
  all = infoLogOfRun(dir, xdg + " LOOM_TUNING_FILE=" + file + " LOOM_STREAMING_MIN_BYTES=1234");
  EXPECT_NE(all.find(calibrated), std::string::npos) << all;
  EXPECT_EQ(all.find("measured now"), std::string::npos) << "the second run reads the cache\n" << all;
  EXPECT_NE(all.find("; LOOM_TUNING_FILE (" + file + "): intra.gbps = 3.5, reduce.gbps = 77; "), std::string::npos)
      << all;
  EXPECT_NE(all.find("; LOOM_STREAMING_MIN_BYTES: streaming.min_bytes = 1234; built in: "), std::string::npos) << all;

  all = infoLogOfRun(dir, xdg + " LOOM_MACHINE_CALIBRATION=0");
  EXPECT_NE(all.find("tuner constants: built in: intra.latency_us = 1.5"), std::string::npos) << all;
#endif
  std::system((std::string("rm -rf ") + dir).c_str());
}
