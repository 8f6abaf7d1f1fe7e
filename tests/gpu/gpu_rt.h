/* SPDX-License-Identifier: BSD-3-Clause */
/* What the gpu suite's runtime tests share: an INI in a private folder, kvl_start, telemetry. */
#ifndef KVL_TEST_GPU_RT_H
#define KVL_TEST_GPU_RT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpu_test.h"
#include "kvlane/kvlane.h"

/* The test's RUNTIME_DIRECTORY and EAL file prefix (gpu_rt_init). Plain C that nvcc's host
 * compiler takes too: no designated initializers or compound literals. */
static char gpu_rt_tmp[32], gpu_rt_prefix[40];

static void gpu_rt_init(const char *name)
{
	snprintf(gpu_rt_tmp, sizeof(gpu_rt_tmp), "/tmp/kvl-%.8s-XXXXXX", name);
	EXPECT(mkdtemp(gpu_rt_tmp) != NULL, "mkdtemp");
	setenv("RUNTIME_DIRECTORY", gpu_rt_tmp, 1);
	snprintf(gpu_rt_prefix, sizeof(gpu_rt_prefix), "kvl-%.8s-%d", name, (int)getpid());
}

static const char *gpu_rt_write_ini(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", gpu_rt_tmp, name);
	f = fopen(path, "w");
	EXPECT(f != NULL, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
	return path;
}

/* One telemetry command through the runtime's own socket (SOCK_SEQPACKET, as any client). */
static void gpu_rt_tel(const char *cmd, char *out, size_t len)
{
	struct sockaddr_un sa;
	struct timespec ten_ms = { 0, 10000000 };
	char greet[1024];
	int fd = -1;
	ssize_t n;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dpdk/%s/dpdk_telemetry.v2", gpu_rt_tmp,
		 gpu_rt_prefix);
	for (int i = 0; i < 200; i++) { /* the socket appears shortly after EAL starts */
		fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		close(fd);
		fd = -1;
		nanosleep(&ten_ms, NULL);
	}
	EXPECT(fd >= 0, "no telemetry socket at %s", sa.sun_path);
	EXPECT(read(fd, greet, sizeof(greet)) > 0, "no greeting");
	EXPECT(write(fd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd), "write %s", cmd);
	n = read(fd, out, len - 1);
	EXPECT(n > 0, "no reply to %s", cmd);
	out[n] = '\0';
	close(fd);
}

/* kvl_start on @ini with EAL on lcores 0-1, no hugepages, no PCI, the test's file prefix. */
static struct kvl_runtime *gpu_rt_start(const char *ini, const char *const *sets, unsigned n_sets,
					char *err, size_t errlen, int *stage)
{
	static char a0[] = "kvl-gpu-test", a1[] = "-l", a2[] = "0-1", a3[] = "--no-huge",
		    a4[] = "-m", a5[] = "256", a6[] = "--no-pci", a7[] = "--file-prefix";
	static char *argv[] = { a0, a1, a2, a3, a4, a5, a6, a7, gpu_rt_prefix, NULL };
	struct kvl_start_args a;

	memset(&a, 0, sizeof(a));
	a.eal_argc = 9;
	a.eal_argv = argv;
	a.config = ini;
	a.sets = sets;
	a.n_sets = n_sets;
	return kvl_start(&a, err, errlen, stage);
}

#endif /* KVL_TEST_GPU_RT_H */
