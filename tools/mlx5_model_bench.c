/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU cost of the mlx5 fast path: ns (and instructions) per posted WQE and per polled CQE. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvl_perf_counter.h"
#include "mlx5.h"

/*
 * No NIC here: the SQ, the doorbell record and the doorbell "register" are heap memory, so
 * this measures what the CPU spends (encoding, the barriers, the stores) and not what a real
 * UAR write costs (an uncached / write-combining store to PCIe: add it on hardware).
 */

#define SQ_BBS 256
#define CQES   4096

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct meas {
	uint64_t ns;
	int64_t insns;
};

static void start(int fd, struct meas *m)
{
	if (fd >= 0) {
		ioctl(fd, PERF_EVENT_IOC_RESET, 0);
		ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
	}
	m->ns = now_ns();
}

static void stop(int fd, struct meas *m)
{
	m->ns = now_ns() - m->ns;
	if (fd >= 0)
		ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
	m->insns = kvl_perf_read(fd);
}

static void report(const char *what, const struct meas *m, uint64_t ops)
{
	char ins[32];

	if (m->insns >= 0)
		snprintf(ins, sizeof(ins), "%.1f", (double)m->insns / (double)ops);
	else
		snprintf(ins, sizeof(ins), "NA");
	printf("%-44s %8.2f ns/op  %6s instructions/op  (%llu ops)\n", what,
	       (double)m->ns / (double)ops, ins, (unsigned long long)ops);
}

static void bench_post(int fd, unsigned batch, unsigned bf_size, unsigned rounds)
{
	static uint8_t sqbuf[SQ_BBS * 64] __attribute__((aligned(64)));
	static uint8_t page[1024] __attribute__((aligned(64)));
	static uint32_t dbrec[2];
	struct kvl_mlx5_sq sq;
	struct kvl_mlx5_sq_attr a = { .buf = sqbuf,
				      .wqe_cnt = SQ_BBS,
				      .qpn = 0x123,
				      .dbrec = dbrec,
				      .bf_reg = page,
				      .bf_size = bf_size,
				      .sig_mode = KVL_MLX5_SIG_EVERY_N,
				      .sig_every = 16 };
	struct kvl_mlx5_sge sge = { 0x10000, 0x55, 4096 };
	struct kvl_mlx5_wqe w = { .opcode = KVL_MLX5_OP_RDMA_WRITE,
				  .raddr = 0x7f0000000000,
				  .rkey = 0x66,
				  .sge = &sge,
				  .nsge = 1 };
	struct meas m;
	uint64_t ops = 0, wrid;
	char what[64];

	if (kvl_mlx5_sq_init(&sq, &a) != 0) {
		fprintf(stderr, "sq init failed\n");
		exit(1);
	}
	start(fd, &m);
	for (unsigned r = 0; r < rounds; r++) {
		uint16_t first = sq.sq_pi;

		for (unsigned i = 0; i < batch; i++) {
			w.wrid = ops++;
			w.raddr += 4096;
			if (kvl_mlx5_sq_post(&sq, &w) != 0)
				abort();
		}
		kvl_mlx5_sq_signal_last(&sq);
		kvl_mlx5_sq_ring(&sq);
		/* The NIC is instant here: give the WQEBBs back at once (a few ns). */
		if (kvl_mlx5_sq_complete(&sq, (uint16_t)(sq.sq_pi - 1), &wrid) != 0 ||
		    sq.sq_ci != sq.sq_pi || (uint16_t)(sq.sq_pi - first) != batch)
			abort();
	}
	stop(fd, &m);
	snprintf(what, sizeof(what), "post WRITE, batch %u, %s", batch,
		 bf_size ? "BlueFlame" : "8-byte doorbell");
	report(what, &m, ops);
	kvl_mlx5_sq_fini(&sq);
}

static void bench_poll(int fd, unsigned burst, unsigned passes)
{
	static uint8_t cqbuf[CQES * 64] __attribute__((aligned(64)));
	static uint32_t dbrec[2];
	struct kvl_mlx5_cq cq;
	struct kvl_mlx5_cqe_info e[64];
	struct meas m, total = { 0, 0 };
	uint64_t ops = 0;
	char what[64];

	for (unsigned i = 0; i < CQES; i++)
		cqbuf[i * 64 + 63] = 0xf0;
	if (kvl_mlx5_cq_init(&cq, cqbuf, CQES, 64, dbrec) != 0)
		abort();
	for (unsigned p = 0; p < passes; p++) {
		/* The NIC's part, not timed: a full pass of REQ CQEs with this pass's owner. */
		for (unsigned i = 0; i < CQES; i++) {
			uint8_t *c = cqbuf + i * 64;
			uint32_t idx = p * CQES + i;

			c[56] = 0x08;
			c[59] = 0x23;
			c[60] = (uint8_t)(idx >> 8);
			c[61] = (uint8_t)idx;
			c[63] = (uint8_t)(p & 1);
		}
		start(fd, &m);
		for (unsigned got = 0; got < CQES;) {
			unsigned n = kvl_mlx5_cq_poll(&cq, e, burst);

			if (n == 0)
				abort();
			got += n;
		}
		stop(fd, &m);
		total.ns += m.ns;
		total.insns = m.insns < 0 || total.insns < 0 ? -1 : total.insns + m.insns;
		ops += CQES;
	}
	snprintf(what, sizeof(what), "poll REQ CQE, burst %u", burst);
	report(what, &total, ops);
}

int main(int argc, char **argv)
{
	unsigned scale = argc > 1 ? (unsigned)atoi(argv[1]) : 1;
	int fd = kvl_perf_open();

	if (scale == 0)
		scale = 1;
	printf("mlx5 fast path on heap memory (no NIC); instructions: %s\n",
	       fd >= 0 ? "perf_event_open" : "NA (perf events not available here)");
	bench_post(fd, 1, 256, 400000 * scale);
	bench_post(fd, 1, 0, 400000 * scale);
	bench_post(fd, 16, 0, 50000 * scale);
	bench_post(fd, 64, 0, 12000 * scale);
	bench_poll(fd, 1, 50 * scale);
	bench_poll(fd, 16, 100 * scale);
	bench_poll(fd, 64, 100 * scale);
	if (fd >= 0)
		close(fd);
	return 0;
}
