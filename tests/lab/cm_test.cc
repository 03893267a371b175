// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// rdma_cm on trdma: the CM MADs of ib_cm over trdma's QP1, as on a RoCE
// port.  Address and route resolution, a connect refused with private data,
// a connect accepted with private data both ways, a SEND over the connected
// RC QP, and a disconnect seen by both sides; over IPv4 and IPv6.  Server
// and client live in this one process, each with its own event channel.
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "lab_util.h"

namespace {

using trdma_lab::DevName;

// The next event on ch within ms (nullptr on time-out); ack it with
// rdma_ack_cm_event.
rdma_cm_event *NextEvent(rdma_event_channel *ch, int ms = 10000) {
  pollfd p = {ch->fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return nullptr;
  rdma_cm_event *ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) return nullptr;
  return ev;
}

// Waits for an event of type on ch; the event, or nullptr.
rdma_cm_event *Expect(rdma_event_channel *ch, rdma_cm_event_type type) {
  rdma_cm_event *ev = NextEvent(ch);
  if (!ev) {
    ADD_FAILURE() << "no " << rdma_event_str(type);
    return nullptr;
  }
  if (ev->event != type) {
    ADD_FAILURE() << "got " << rdma_event_str(ev->event) << " (status "
                  << ev->status << "), wanted " << rdma_event_str(type);
    rdma_ack_cm_event(ev);
    return nullptr;
  }
  return ev;
}

std::string Data(const rdma_conn_param &p, size_t n) {
  if (!p.private_data || p.private_data_len < n) return "";
  return std::string(static_cast<const char *>(p.private_data), n);
}

class CmTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const char *env = getenv(GetParam() == AF_INET6 ? "TRDMA_LAB_ADDR6"
                                                    : "TRDMA_LAB_ADDR");
    std::string a = env ? env : "";
    a = a.substr(0, a.find('/'));
    ASSERT_FALSE(a.empty()) << "no lab address";
    addrinfo hints = {}, *res = nullptr;
    hints.ai_family = GetParam();
    hints.ai_flags = AI_NUMERICHOST;
    ASSERT_EQ(getaddrinfo(a.c_str(), "7471", &hints, &res), 0) << a;
    memcpy(&addr_, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);

    sch_ = rdma_create_event_channel();
    cch_ = rdma_create_event_channel();
    ASSERT_TRUE(sch_ && cch_);
    ASSERT_EQ(rdma_create_id(sch_, &listen_, nullptr, RDMA_PS_TCP), 0);
    // Earlier tests may have taken the netdev's MTU below IPv6's minimum,
    // which drops its IPv6 addresses: the lab's address comes back, and
    // its GID with it (the RDMA core adds it asynchronously).
    if (GetParam() == AF_INET6)
      trdma_lab::Sh("ip -6 addr add " + a + "/64 dev " +
                    trdma_lab::NetdevName() + " nodad 2>/dev/null");
    int rv = -1;
    for (int i = 0; i < 50 && (rv = rdma_bind_addr(listen_, sa())); i++)
      usleep(100000);
    ASSERT_EQ(rv, 0) << strerror(errno);
    ASSERT_EQ(rdma_listen(listen_, 4), 0) << strerror(errno);
    ASSERT_NE(listen_->verbs, nullptr) << "bound to no device";
    EXPECT_STREQ(ibv_get_device_name(listen_->verbs->device),
                 DevName().c_str());
  }
  void TearDown() override {
    if (cmr_) rdma_dereg_mr(cmr_);
    if (smr_) rdma_dereg_mr(smr_);
    for (rdma_cm_id *id : {client_, server_}) {
      if (!id) continue;
      if (id->qp) rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
    if (listen_) rdma_destroy_id(listen_);
    if (cch_) rdma_destroy_event_channel(cch_);
    if (sch_) rdma_destroy_event_channel(sch_);
  }
  sockaddr *sa() { return reinterpret_cast<sockaddr *>(&addr_); }

  // A client id resolved to the server's address and route.
  void Resolve() {
    ASSERT_EQ(rdma_create_id(cch_, &client_, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_resolve_addr(client_, nullptr, sa(), 5000), 0);
    rdma_cm_event *ev = Expect(cch_, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_NE(ev, nullptr);
    rdma_ack_cm_event(ev);
    ASSERT_EQ(rdma_resolve_route(client_, 5000), 0);
    ev = Expect(cch_, RDMA_CM_EVENT_ROUTE_RESOLVED);
    ASSERT_NE(ev, nullptr);
    rdma_ack_cm_event(ev);
    EXPECT_STREQ(ibv_get_device_name(client_->verbs->device),
                 DevName().c_str());
  }
  static void Qp(rdma_cm_id *id) {
    ibv_qp_init_attr a = {};
    a.qp_type = IBV_QPT_RC;
    a.cap = {4, 4, 1, 1, 0};
    a.sq_sig_all = 1;
    ASSERT_EQ(rdma_create_qp(id, nullptr, &a), 0) << strerror(errno);
  }

  sockaddr_storage addr_ = {};
  rdma_event_channel *sch_ = nullptr, *cch_ = nullptr;
  rdma_cm_id *listen_ = nullptr, *client_ = nullptr, *server_ = nullptr;
  ibv_mr *cmr_ = nullptr, *smr_ = nullptr;
};

TEST_P(CmTest, RejectThenAcceptWithPrivateDataSendAndDisconnect) {
  const std::string req = "connect request private data, 40 bytes!";
  const std::string rej = "rejected: come back later, 36 bytes!";
  const std::string rep = "accepted: reply private data, 38 byte";

  // 1. Refused, with private data.
  ASSERT_NO_FATAL_FAILURE(Resolve());
  ASSERT_NO_FATAL_FAILURE(Qp(client_));
  rdma_conn_param cp = {};
  cp.private_data = req.data();
  cp.private_data_len = req.size();
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(client_, &cp), 0) << strerror(errno);
  rdma_cm_event *ev = Expect(sch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(Data(ev->param.conn, req.size()), req);
  ASSERT_EQ(rdma_reject(ev->id, rej.data(), rej.size()), 0);
  rdma_destroy_id(ev->id);
  rdma_ack_cm_event(ev);
  ev = Expect(cch_, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(Data(ev->param.conn, rej.size()), rej);
  rdma_ack_cm_event(ev);
  rdma_destroy_qp(client_);
  rdma_destroy_id(client_);
  client_ = nullptr;

  // 2. Accepted, private data both ways.
  ASSERT_NO_FATAL_FAILURE(Resolve());
  ASSERT_NO_FATAL_FAILURE(Qp(client_));
  ASSERT_EQ(rdma_connect(client_, &cp), 0) << strerror(errno);
  ev = Expect(sch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(ev, nullptr);
  server_ = ev->id;
  EXPECT_EQ(Data(ev->param.conn, req.size()), req);
  rdma_ack_cm_event(ev);
  ASSERT_NO_FATAL_FAILURE(Qp(server_));
  static char sbuf[64], cbuf[64];
  smr_ = rdma_reg_msgs(server_, sbuf, sizeof(sbuf));
  cmr_ = rdma_reg_msgs(client_, cbuf, sizeof(cbuf));
  ASSERT_TRUE(smr_ && cmr_);
  ASSERT_EQ(rdma_post_recv(server_, nullptr, sbuf, sizeof(sbuf), smr_), 0);
  rdma_conn_param ap = {};
  ap.private_data = rep.data();
  ap.private_data_len = rep.size();
  ASSERT_EQ(rdma_accept(server_, &ap), 0) << strerror(errno);
  ev = Expect(cch_, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(Data(ev->param.conn, rep.size()), rep);
  rdma_ack_cm_event(ev);
  ev = Expect(sch_, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(ev, nullptr);
  rdma_ack_cm_event(ev);
  EXPECT_STREQ(ibv_get_device_name(server_->verbs->device), DevName().c_str());

  // 3. A SEND over the RC QPs rdma_cm connected.
  strcpy(cbuf, "hello over rdma_cm");
  ASSERT_EQ(rdma_post_send(client_, nullptr, cbuf, sizeof(cbuf), cmr_, 0), 0);
  ibv_wc wc;
  ASSERT_EQ(rdma_get_send_comp(client_, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  ASSERT_EQ(rdma_get_recv_comp(server_, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.byte_len, sizeof(cbuf));
  EXPECT_STREQ(sbuf, "hello over rdma_cm");

  // 4. Disconnect: the server hears of the client's DREQ and answers it
  // with its own rdma_disconnect (the DREP), then the client hears of it.
  ASSERT_EQ(rdma_disconnect(client_), 0);
  ev = Expect(sch_, RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_NE(ev, nullptr);
  rdma_ack_cm_event(ev);
  ASSERT_EQ(rdma_disconnect(server_), 0);
  ev = Expect(cch_, RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_NE(ev, nullptr);
  rdma_ack_cm_event(ev);
}

INSTANTIATE_TEST_SUITE_P(Family, CmTest, ::testing::Values(AF_INET, AF_INET6),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return std::string(i.param == AF_INET6 ? "IPv6"
                                                                  : "IPv4");
                         });

}  // namespace
