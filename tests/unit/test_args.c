/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of kvlaned's command line: the split at "--" and kvlane's own options. */
#include <errno.h>

#include "args.h"
#include "kvlane/kvlane.h"
#include "kvl_test.h"

#define ARGV(...) ((char *[]){ "kvlaned", __VA_ARGS__, NULL })

static int parse(char **v, int c, struct kvl_args *a, char *err)
{
	return kvl_args_parse(c, v, a, err, 256);
}

static void test_split(void)
{
	char *v[] = { "kvlaned", "-l", "2-5", "--in-memory", "--", "-c", "x.ini", NULL };
	struct kvl_args a;
	char err[256];

	CHECK_INT(parse(v, 7, &a, err), 0);
	CHECK_INT(a.eal_argc, 4); /* argv[0] and three EAL arguments, "--" excluded */
	CHECK_STR(a.eal_argv[3], "--in-memory");
	CHECK_STR(a.config, "x.ini");
	CHECK_STR(a.sysfs_root, "/sys");
	CHECK_INT(a.run_seconds, 0);
	CHECK(!a.print_config && !a.help && !a.version);
}

static void test_options(void)
{
	char *v[] = { "kvlaned",       "--", "--config", "y.ini", "-p",	   "--sysfs-root", "/tmp/s",
		      "--run-seconds", "7",  "--set",	 "a.b=1", "--set", "c.d = 2",	   NULL };
	struct kvl_args a;
	char err[256];

	CHECK_INT(parse(v, 13, &a, err), 0);
	CHECK_INT(a.n_sets, 2);
	CHECK_STR(a.sets[0], "a.b=1");
	CHECK_STR(a.sets[1], "c.d = 2");
	CHECK_INT(a.eal_argc, 1);
	CHECK_STR(a.config, "y.ini");
	CHECK(a.print_config);
	CHECK_STR(a.sysfs_root, "/tmp/s");
	CHECK_INT(a.run_seconds, 7);
}

/* --doctor: the checks before the start; off unless asked, and never taken from EAL's side. */
static void test_doctor(void)
{
	char *on[] = { "kvlaned", "-l", "0-1", "--", "-c", "x.ini", "--doctor", NULL };
	char *off[] = { "kvlaned", "--doctor", "--", "-c", "x.ini", NULL };
	struct kvl_args a;
	char err[256];

	CHECK_INT(parse(on, 7, &a, err), 0);
	CHECK(a.doctor);
	CHECK_STR(a.config, "x.ini");
	CHECK_INT(a.eal_argc, 3);
	CHECK_INT(parse(off, 5, &a, err), 0);
	CHECK(!a.doctor); /* before "--" it is EAL's argument */
}

static void test_help_anywhere(void)
{
	char *before[] = { "kvlaned", "--help", NULL };
	char *after[] = { "kvlaned", "-l", "0", "--", "-h", NULL };
	char *version[] = { "kvlaned", "-V", NULL };
	struct kvl_args a;
	char err[256];

	CHECK_INT(parse(before, 2, &a, err), 0);
	CHECK(a.help);
	CHECK_INT(parse(after, 5, &a, err), 0);
	CHECK(a.help);
	CHECK_INT(parse(version, 2, &a, err), 0);
	CHECK(a.version);
}

struct bad {
	char **argv;
	int argc;
	const char *msg;
};

static void test_errors(void)
{
	struct kvl_args a;
	char err[256];
	const struct bad bad[] = {
		{ ARGV("-l", "0-1"), 3, "put them after \"--\"" },
		{ ARGV("--"), 2, "-c FILE.ini is required" },
		{ ARGV("--", "-c"), 3, "-c needs a value" },
		{ ARGV("--", "-c", ""), 4, "-c needs a value" },
		{ ARGV("--", "-c", "a", "-c", "b"), 6, "given twice" },
		{ ARGV("--", "-c", "a", "--frobnicate"), 5, "unknown option \"--frobnicate\"" },
		{ ARGV("--", "-c", "a", "--run-seconds", "soon"), 6, "--run-seconds: expected" },
		{ ARGV("--", "-c", "a", "--run-seconds", "-1"), 6, "--run-seconds: expected" },
		{ ARGV("--", "-c", "a", "--run-seconds", "5x"), 6, "--run-seconds: expected" },
		{ ARGV("--", "-c", "a", "--sysfs-root"), 5, "--sysfs-root needs a value" },
		{ ARGV("--", "-c", "a", "--set"), 5, "--set needs a value" },
	};

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_INT(parse(bad[i].argv, bad[i].argc, &a, err), -EINVAL);
		CHECK_HAS(err, bad[i].msg);
	}
}

/* The public header's version and the build's (meson project version) agree. */
static void test_version(void)
{
	char v[32];

	snprintf(v, sizeof(v), "%d.%d.%d", KVLANE_VERSION_MAJOR, KVLANE_VERSION_MINOR,
		 KVLANE_VERSION_PATCH);
	CHECK_STR(v, KVL_VERSION);
}

int main(void)
{
	test_version();
	test_split();
	test_options();
	test_help_anywhere();
	test_doctor();
	test_errors();
	return kvl_test_done("args");
}
