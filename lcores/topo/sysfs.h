/* SPDX-License-Identifier: BSD-3-Clause */
/* Private to lcores/: sysfs paths and attributes, and bounded error-message building. */
#ifndef KVL_LCORES_SYSFS_H
#define KVL_LCORES_SYSFS_H

#include <stddef.h>

/* A bounded message under construction; a NULL/0 buffer swallows everything. */
struct kvl_msg {
	char *buf;
	size_t cap;
	size_t len;
};

void kvl_msg_init(struct kvl_msg *m, char *buf, size_t cap);

/* Append; a message that does not fit ends in "..." so a cut list is not read as whole. */
__attribute__((format(printf, 2, 3))) void kvl_msg_add(struct kvl_msg *m, const char *fmt, ...);

/* Copy that always terminates and never trips -Wformat-truncation or -Wstringop-*. */
void kvl_copy_str(char *dst, size_t cap, const char *src);

/* <root>/<fmt...> (root NULL = "/sys", trailing '/' dropped, so messages show "/sys/class/..."
 * on a host). Returns 0 or -ENAMETOOLONG. */
__attribute__((format(printf, 4, 5))) int
kvl_sysfs_path(char *buf, size_t cap, const char *sysfs_root, const char *fmt, ...);

/* One attribute, trailing white space trimmed. Returns its length or a negative errno (a
 * missing file and an attribute that fails to read are both normal outcomes). */
int kvl_sysfs_read(const char *path, char *buf, size_t cap);

/* A decimal integer attribute ("-1" included). Returns 0, or -EINVAL for an empty or
 * non-numeric one, or the read's negative errno. */
int kvl_sysfs_read_long(const char *path, long *v);

/* Entries of a directory but "." names, sorted; free with kvl_sysfs_free_list().
 * Returns the count or a negative errno. */
struct dirent;
int kvl_sysfs_list(const char *path, struct dirent ***names);
void kvl_sysfs_free_list(struct dirent **names, int n);

#endif /* KVL_LCORES_SYSFS_H */
