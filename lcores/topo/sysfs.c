/* SPDX-License-Identifier: BSD-3-Clause */
/* sysfs paths and attributes, and bounded error messages, for topology and pairing. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sysfs.h"
#include "topo.h"

void kvl_msg_init(struct kvl_msg *m, char *buf, size_t cap)
{
	m->buf = buf;
	m->cap = buf ? cap : 0;
	m->len = 0;
	if (m->cap)
		buf[0] = '\0';
}

void kvl_msg_add(struct kvl_msg *m, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (m->len + 1 >= m->cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(m->buf + m->len, m->cap - m->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	m->len += (size_t)n;
	if (m->len >= m->cap) {
		/* Say that it was clipped, so nobody reads a cut list as the whole list. */
		m->len = m->cap - 1;
		if (m->cap > 4)
			memcpy(m->buf + m->cap - 4, "...", 4);
	}
}

/* Copy that always terminates and never trips -Wformat-truncation or -Wstringop-*. */
void kvl_copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);

	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* NULL means the host's own sysfs; a trailing '/' is dropped so paths print cleanly. */
static void root_of(const char *sysfs_root, const char **root, int *rootlen)
{
	size_t n;

	if (sysfs_root == NULL)
		sysfs_root = "/sys";
	n = strlen(sysfs_root);
	while (n > 0 && sysfs_root[n - 1] == '/')
		n--;
	*root = sysfs_root;
	*rootlen = (int)n;
}

/* <root>/<rel...>; printing the same string in messages shows "/sys/class/..." on a host. */
int kvl_sysfs_path(char *buf, size_t cap, const char *sysfs_root, const char *fmt, ...)
{
	const char *root;
	int rootlen, n, m;
	va_list ap;

	root_of(sysfs_root, &root, &rootlen);
	n = snprintf(buf, cap, "%.*s/", rootlen, root);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	va_start(ap, fmt);
	m = vsnprintf(buf + n, cap - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)(n + m) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * One sysfs attribute, trailing whitespace trimmed. sysfs hands out an attribute in a single
 * read(); some attributes exist but fail to read (gid_attrs/ndevs/N of an InfiniBand port gives
 * EINVAL), so a read error is as normal an outcome as a missing file.
 */
int kvl_sysfs_read(const char *path, char *buf, size_t cap)
{
	ssize_t n;
	int fd;

	if (cap == 0)
		return -EINVAL;
	buf[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, cap - 1);
	if (n < 0) {
		int e = -errno;

		close(fd);
		buf[0] = '\0';
		return e;
	}
	close(fd);
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		n--;
	buf[n] = '\0';
	return (int)n;
}

int kvl_sysfs_read_long(const char *path, long *v)
{
	char buf[32], *end;
	int rc;

	rc = kvl_sysfs_read(path, buf, sizeof(buf));
	if (rc < 0)
		return rc;
	if (rc == 0)
		return -EINVAL;
	errno = 0;
	*v = strtol(buf, &end, 10);
	if (errno || *end != '\0')
		return -EINVAL;
	return 0;
}

static int no_dots(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

int kvl_sysfs_list(const char *path, struct dirent ***names)
{
	int n = scandir(path, names, no_dots, alphasort);

	return n < 0 ? -errno : n;
}

void kvl_sysfs_free_list(struct dirent **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static void fmt_limit(rlim_t v, char *buf, size_t cap)
{
	if (v == RLIM_INFINITY)
		snprintf(buf, cap, "unlimited");
	else
		snprintf(buf, cap, "%llu KiB", (unsigned long long)(v / 1024));
}

void kvl_memlock_limits(char *cur, char *max, size_t cap)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
		snprintf(cur, cap, "unknown");
		snprintf(max, cap, "unknown");
		return;
	}
	fmt_limit(rl.rlim_cur, cur, cap);
	fmt_limit(rl.rlim_max, max, cap);
}
