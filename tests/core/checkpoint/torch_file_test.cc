// torch.save files read strictly (core/checkpoint/torch_file.h): tensors
// come back with their values; a pickle naming any global outside the
// allow-list, an unknown opcode, a truncated or damaged archive and a
// compressed entry are refused with the file and the reason, never run.
// The archives are built here byte by byte (zip of stored entries, pickle
// protocol 2 as torch.save writes it); real ones from torch and DeepSpeed
// are read by tests/external/deepspeed/check_checkpoint_import.py.
#include "core/checkpoint/torch_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "tests/core/checkpoint/torch_save_writer.h"
#include "tests/fakes/temp_dir.h"

namespace dscore::checkpoint {
namespace {

using dscore::testing::TempDir;
using namespace dscore::checkpoint::testing;

// {"w": tensor [2, 3] of storage "0" from element 1, "step": 7, "name": "mlp"}
std::string good_pickle() {
  return std::string("\x80\x02") + "}(" + str("w") + tensor("0", {2, 3}, 1) + str("step") +
         binint(7) + str("name") + str("mlp") + "u.";
}

std::string good_archive() {
  return zip({{"archive/data.pkl", good_pickle()},
              {"archive/byteorder", "little"},
              {"archive/data/0", floats({9, 1, 2, 3, 4, 5, 6})},
              {"archive/version", "3\n"}});
}

class TorchFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& bytes) { return dir_.write("f.pt", bytes).string(); }
  TempDir dir_{"dscore_torch_file"};
};

TEST_F(TorchFileTest, ReadsTensorsNumbersAndStrings) {
  const std::string path = write(good_archive());
  auto file = TorchFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const PickleValue& root = file->root();
  ASSERT_TRUE(root.is(PickleValue::Kind::kDict));
  ASSERT_NE(root.get("w"), nullptr);
  const TorchTensor& w = root.get("w")->tensor;
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.dtype, DSCORE_DTYPE_F32);
  auto values = file->read_f32(w);
  ASSERT_TRUE(values.ok()) << values.status().message();
  EXPECT_EQ(*values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  float part[2];
  ASSERT_TRUE(file->read_f32(w, 3, 2, part).ok());
  EXPECT_EQ(part[0], 4);
  EXPECT_EQ(part[1], 5);
  EXPECT_EQ(root.get("step")->integer, 7);
  EXPECT_EQ(root.get("name")->text, "mlp");
}

TEST_F(TorchFileTest, ALargeStorageStreamsAndIsStillChecksummed) {
  // Past 64 MiB a storage is streamed (converted as it passes), not kept.
  const int n = 17'000'000;
  std::vector<float> values(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i);
  const std::string pickle =
      std::string("\x80\x02") + "}(" + str("w") + tensor("0", {n - 3}, 3) + "u.";
  std::string bytes = zip({{"a/data.pkl", pickle}, {"a/data/0", floats(values)}});
  auto file = TorchFile::open(write(bytes));
  ASSERT_TRUE(file.ok()) << file.status().message();
  float got[10];
  ASSERT_TRUE(file->read_f32(file->root().get("w")->tensor, 9'000'000, 10, got).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(got[i], static_cast<float>(9'000'003 + i));
  bytes[bytes.size() - 200] ^= 1;  // in the storage's last bytes, far from the slice read
  auto damaged = TorchFile::open(write(bytes));
  ASSERT_TRUE(damaged.ok()) << damaged.status().message();
  Status st = damaged->read_f32(damaged->root().get("w")->tensor, 0, 10, got);
  EXPECT_FALSE(st.ok());
}

TEST_F(TorchFileTest, AGlobalOutsideTheAllowListIsRefusedByName) {
  // What a malicious pickle does: os.system("...") on load.
  const std::string evil =
      std::string("\x80\x02") + global("os", "system") + "(" + str("touch /tmp/pwned") + "tR.";
  const std::string path = write(zip({{"a/data.pkl", evil}}));
  auto file = TorchFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  EXPECT_NE(file.status().message().find("the global os.system"), std::string::npos)
      << file.status().message();
  // STACK_GLOBAL (protocol 4) is checked the same way.
  const std::string stacked =
      std::string("\x80\x04") + str("builtins") + str("eval") + "\x93" + "(" + str("1") + "tR.";
  auto second = TorchFile::open(write(zip({{"a/data.pkl", stacked}})));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("the global builtins.eval"), std::string::npos)
      << second.status().message();
}

TEST_F(TorchFileTest, AnUnknownOpcodeIsRefused) {
  // INST ('i') builds an object from a class named inline: not in the subset.
  const std::string inst = std::string("\x80\x02") + "(ios\nsystem\n.";
  auto file = TorchFile::open(write(zip({{"a/data.pkl", inst}})));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("opcode 0x69"), std::string::npos)
      << file.status().message();
}

TEST_F(TorchFileTest, EveryTruncationIsNamedNeverACrash) {
  const std::string whole = good_archive();
  for (size_t keep = 0; keep < whole.size(); ++keep) {
    const std::string path = write(whole.substr(0, keep));
    auto file = TorchFile::open(path);
    if (file.ok()) {  // the directory survived: then reading the tensor fails
      auto values = file->read_f32(file->root().get("w")->tensor);
      EXPECT_FALSE(values.ok()) << keep;
      continue;
    }
    EXPECT_EQ(file.status().code(), DSCORE_DATA_LOSS) << keep << ": " << file.status().message();
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  }
}

TEST_F(TorchFileTest, ADamagedTensorFailsItsChecksum) {
  std::string bytes = good_archive();
  const size_t at = bytes.find(floats({9, 1, 2}));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] ^= 0x40;
  auto file = TorchFile::open(write(bytes));
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto values = file->read_f32(file->root().get("w")->tensor);
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("archive/data/0 fails its CRC-32 check"),
            std::string::npos)
      << values.status().message();
}

TEST_F(TorchFileTest, CompressedEntriesAndNonTorchZipsAreNamed) {
  auto compressed = TorchFile::open(write(zip({{"a/data.pkl", good_pickle()}}, 8)));
  ASSERT_FALSE(compressed.ok());
  EXPECT_NE(compressed.status().message().find("is compressed (method 8)"), std::string::npos)
      << compressed.status().message();
  auto other = TorchFile::open(write(zip({{"readme.txt", "hi"}})));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("not a torch.save file"), std::string::npos)
      << other.status().message();
  auto missing = TorchFile::open(dir_.file("none.pt"));
  EXPECT_EQ(missing.status().code(), DSCORE_NOT_FOUND);
}

TEST_F(TorchFileTest, AStorageKeyCannotLeaveTheArchive) {
  std::string pickle = good_pickle();
  const std::string key = str("0");
  pickle.replace(pickle.find(key), key.size(), str("../0"));
  auto file = TorchFile::open(write(zip({{"a/data.pkl", pickle}})));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("not a plain name"), std::string::npos)
      << file.status().message();
}

}  // namespace
}  // namespace dscore::checkpoint
