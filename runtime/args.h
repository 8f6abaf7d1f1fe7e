/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlaned's command line: EAL arguments before "--", kvlane's own after it. */
#ifndef KVL_RUNTIME_ARGS_H
#define KVL_RUNTIME_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define KVL_ARGS_MAX_SETS 32

struct kvl_args {
	int eal_argc; /* argv[0] and everything before "--" */
	char **eal_argv;
	const char *config;		     /* -c / --config */
	const char *sysfs_root;		     /* --sysfs-root (default "/sys") */
	const char *sets[KVL_ARGS_MAX_SETS]; /* --set section.key=value, in order */
	unsigned n_sets;
	unsigned run_seconds; /* --run-seconds (0: until SIGINT/SIGTERM) */
	bool print_config;    /* -p / --print-config */
	bool doctor;	      /* --doctor: run kvlane-doctor's checks first, refuse on a FAIL */
	bool help;	      /* -h / --help, anywhere on the line */
	bool version;	      /* -V / --version */
};

/*
 * Split and parse @argv. EAL arguments are left in eal_argc/eal_argv (pointing into @argv)
 * for rte_eal_init(). Returns 0, or -EINVAL with a one-line message in @err.
 */
int kvl_args_parse(int argc, char **argv, struct kvl_args *a, char *err, size_t errlen);

/* The --help text. */
void kvl_args_usage(const char *prog, FILE *fp);

#endif /* KVL_RUNTIME_ARGS_H */
