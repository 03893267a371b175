// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// The trdma device as unmodified tools see it: device list, device and port
// attributes, the RoCE v2 GID table derived from the netdev's addresses, the
// port following the netdev, and clean errors for verbs not implemented yet.
#include <arpa/inet.h>
#include <net/if.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <rdma/trdma-abi.h>

#include "lab_util.h"

using namespace trdma_lab;

namespace {

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = OpenDevice(DevName());
    ASSERT_TRUE(ctx_) << "cannot open " << DevName();
  }
  void TearDown() override {
    // Leave the netdev as the next test expects it, whatever happened.
    Sh("ip link set dev " + NetdevName() + " mtu 1500 up");
  }
  Context ctx_;
};

// Returns the GID table index holding gid, or -1.
int FindGid(ibv_context *ctx, const ibv_gid &gid, ibv_gid_entry *found) {
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) return -1;
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0)) continue;
    if (!memcmp(&e.gid, &gid, sizeof(gid))) {
      *found = e;
      return i;
    }
  }
  return -1;
}

ibv_gid V4MappedGid(const std::string &addr) {
  ibv_gid g = {};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  EXPECT_EQ(inet_pton(AF_INET, addr.c_str(), &g.raw[12]), 1) << addr;
  return g;
}

// Polls f() for up to 10 s.
template <typename F>
bool Eventually(F f) {
  for (int i = 0; i < 100; i++) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(DeviceList, TrdmaDeviceIsListedAsIbCa) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  bool seen = false;
  for (int i = 0; i < n; i++) {
    if (DevName() != ibv_get_device_name(list[i])) continue;
    seen = true;
    EXPECT_EQ(list[i]->node_type, IBV_NODE_CA);
    EXPECT_EQ(list[i]->transport_type, IBV_TRANSPORT_IB);
  }
  ibv_free_device_list(list);
  EXPECT_TRUE(seen) << DevName() << " not in ibv_get_device_list()";
}

TEST_F(DeviceTest, QueryDeviceIsHonest) {
  ibv_device_attr_ex attr = {};
  ASSERT_EQ(ibv_query_device_ex(ctx_.get(), nullptr, &attr), 0);
  EXPECT_EQ(attr.orig_attr.phys_port_cnt, 1);
  EXPECT_EQ(attr.orig_attr.vendor_id, 0xffffffu);
  EXPECT_EQ(attr.orig_attr.max_pkeys, 1);
  EXPECT_EQ(attr.orig_attr.sys_image_guid, attr.orig_attr.node_guid);
  EXPECT_EQ(attr.orig_attr.atomic_cap, IBV_ATOMIC_HCA);
  // Fast registration for kernel ULPs (and SEND_WITH_INV for everyone);
  // memory windows of type 1 and 2B (tests/lab/mw_test.cc).
  EXPECT_TRUE(attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS);
  EXPECT_TRUE(attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_EQ(attr.orig_attr.max_mw, attr.orig_attr.max_mr);

  // The node GUID is the EUI-64 of the netdev's MAC, as on a RoCE NIC.
  unsigned m[6];
  std::string mac = ReadFile("/sys/class/net/" + NetdevName() + "/address");
  ASSERT_EQ(sscanf(mac.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2],
                   &m[3], &m[4], &m[5]),
            6);
  uint8_t want[8] = {uint8_t(m[0] ^ 2), uint8_t(m[1]), uint8_t(m[2]), 0xff,
                     0xfe, uint8_t(m[3]), uint8_t(m[4]), uint8_t(m[5])};
  EXPECT_EQ(memcmp(&attr.orig_attr.node_guid, want, 8), 0);
}

TEST_F(DeviceTest, PortIsActiveEthernet) {
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.phys_state, 5);  // LinkUp
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.max_mtu, IBV_MTU_4096);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);  // netdev MTU 1500
  EXPECT_EQ(pa.pkey_tbl_len, 1);
  EXPECT_GT(pa.gid_tbl_len, 1);
  EXPECT_EQ(pa.max_msg_sz, 0x80000000u);
  EXPECT_NE(ibv_query_port(ctx_.get(), 2, &pa), 0);
}

TEST_F(DeviceTest, PkeyTableHoldsDefaultPkey) {
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_.get(), 1, 0, &pkey), 0);
  EXPECT_EQ(ntohs(pkey), 0xffff);
  EXPECT_NE(ibv_query_pkey(ctx_.get(), 1, 1, &pkey), 0);
}

TEST_F(DeviceTest, GidTableHasRoceV2GidsOfNetdevAddresses) {
  ibv_gid_entry e;
  int idx = FindGid(ctx_.get(), V4MappedGid(NetdevAddr()), &e);
  ASSERT_GE(idx, 0) << "no GID for " << NetdevAddr();
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(e.ndev_ifindex, if_nametoindex(NetdevName().c_str()));

  // sysfs agrees, as rdma-core's tools and perftest read it.
  std::string base = "/sys/class/infiniband/" + DevName() + "/ports/1/";
  EXPECT_EQ(ReadFile(base + "gid_attrs/types/" + std::to_string(idx)),
            "RoCE v2");
  EXPECT_EQ(ReadFile(base + "gid_attrs/ndevs/" + std::to_string(idx)),
            NetdevName());
}

TEST_F(DeviceTest, GidTableFollowsAddressChanges) {
  const std::string extra = "10.99.7.7";
  ibv_gid_entry e;
  ASSERT_EQ(Sh("ip addr add " + extra + "/24 dev " + NetdevName()), 0);
  EXPECT_TRUE(Eventually(
      [&] { return FindGid(ctx_.get(), V4MappedGid(extra), &e) >= 0; }));
  ASSERT_EQ(Sh("ip addr del " + extra + "/24 dev " + NetdevName()), 0);
  EXPECT_TRUE(Eventually(
      [&] { return FindGid(ctx_.get(), V4MappedGid(extra), &e) < 0; }));
}

TEST_F(DeviceTest, SysfsDescribesTheDevice) {
  std::string base = "/sys/class/infiniband/" + DevName() + "/";
  EXPECT_EQ(ReadFile(base + "hca_type"), TRDMA_HCA_TYPE);
  EXPECT_EQ(ReadFile(base + "parent"), NetdevName());
  EXPECT_EQ(ReadFile(base + "node_type"), "1: CA");
  EXPECT_EQ(ReadFile(base + "ports/1/link_layer"), "Ethernet");
  EXPECT_EQ(ReadFile(base + "ports/1/state"), "4: ACTIVE");
}

TEST_F(DeviceTest, IbvDevinfoShowsActiveRoceV2Port) {
  std::string out = ShOut("ibv_devinfo -v -d " + DevName());
  EXPECT_NE(out.find("PORT_ACTIVE"), std::string::npos) << out;
  EXPECT_NE(out.find("link_layer:\t\tEthernet"), std::string::npos) << out;
  EXPECT_NE(out.find("::ffff:" + NetdevAddr()), std::string::npos) << out;
  EXPECT_NE(out.find("RoCE v2"), std::string::npos) << out;
  EXPECT_NE(out.find("transport:\t\t\tInfiniBand"), std::string::npos) << out;
}

TEST_F(DeviceTest, PortFollowsNetdevDownAndUpWithAsyncEvents) {
  ibv_port_attr pa;
  ASSERT_EQ(Sh("ip link set dev " + NetdevName() + " down"), 0);
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_PORT_ERR, 10000));
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  EXPECT_EQ(pa.phys_state, 3);  // Disabled

  ASSERT_EQ(Sh("ip link set dev " + NetdevName() + " up"), 0);
  EXPECT_TRUE(WaitAsyncEvent(ctx_.get(), IBV_EVENT_PORT_ACTIVE, 10000));
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
}

TEST_F(DeviceTest, ActiveMtuFollowsNetdevMtu) {
  ibv_port_attr pa;
  ASSERT_EQ(Sh("ip link set dev " + NetdevName() + " mtu 9000"), 0);
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
  ASSERT_EQ(Sh("ip link set dev " + NetdevName() + " mtu 1500"), 0);
  ASSERT_EQ(ibv_query_port(ctx_.get(), 1, &pa), 0);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
}

}  // namespace
