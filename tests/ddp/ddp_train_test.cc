// The example training loop under loomrun: it prints one line per epoch, and it learns.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Epoch {
  int number = 0;
  double loss = 0, accuracy = 0;
};

// Runs command; returns its exit status and collects the "epoch" lines of its output.
int run(const std::string& command, std::vector<Epoch>* epochs, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    *output += line;
    Epoch e;
    if (std::sscanf(line, "epoch %d loss %lf test accuracy %lf%%", &e.number, &e.loss, &e.accuracy) == 3) {
      epochs->push_back(e);
    }
  }
  return pclose(pipe);
}

TEST(DdpTrain, LearnsOnTwoAndFourRanksUnderLoomrun) {
  const char* loomrun = std::getenv("LOOMRUN");
  const char* train = std::getenv("DDP_TRAIN");
  ASSERT_NE(loomrun, nullptr) << "meson sets LOOMRUN";
  ASSERT_NE(train, nullptr) << "meson sets DDP_TRAIN";
  for (const char* ranks : {"2", "4"}) {
    for (const char* extra : {"--optimizer sgd", "--optimizer adam --lr 0.002 --compression bf16"}) {
      std::vector<Epoch> epochs;
      std::string output;
      const std::string command = std::string(loomrun) + " -n " + ranks + " " + train +
                                  " --epochs 3 --samples 4096 --hidden 64 --layers 2 --batch 128 " + extra;
      ASSERT_EQ(run(command, &epochs, &output), 0) << command << "\n" << output;
      ASSERT_EQ(epochs.size(), 3u) << command << "\n" << output;
      EXPECT_LT(epochs[2].loss, epochs[0].loss) << command << "\n" << output;
      EXPECT_GT(epochs[2].accuracy, 50.0) << "10 classes: chance is 10%\n" << command << "\n" << output;
    }
  }
}

}  // namespace
