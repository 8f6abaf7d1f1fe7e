/* SPDX-License-Identifier: BSD-3-Clause */
/* Verbs transport, memory: registration, and the lkey of a local range (lock-free lookup). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvl_clock.h"
#include "topo.h"
#include "verbs_priv.h"

int kvl_verbs_reg(struct kvl_verbs_dev *d, void *base, uint64_t len, uint32_t flags, uint32_t *rkey,
		  uint64_t *ns, char *err, size_t errlen)
{
	int access = IBV_ACCESS_LOCAL_WRITE; /* RDMA READ lands in local memory */
	struct ibv_mr *mr;
	uint64_t t0, t1;
	unsigned n;

	kvl_verbs_err_clear(err, errlen);
	if (d == NULL || base == NULL || len == 0 ||
	    (flags & ~(uint32_t)(KVL_SEG_REMOTE_READ | KVL_SEG_REMOTE_WRITE)) != 0) {
		kvl_verbs_errf(err, errlen,
			       "%s: nothing to register (base %p, %llu bytes, flags 0x%x)",
			       d ? d->name : "?", base, (unsigned long long)len, flags);
		return -EINVAL;
	}
	n = d->n_mr;
	if (n == MAX_MRS) {
		kvl_verbs_errf(err, errlen,
			       "%s: %u regions are registered already, the most one device holds",
			       d->name, MAX_MRS);
		return -ENOSPC;
	}
	if (flags & KVL_SEG_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	if (flags & KVL_SEG_REMOTE_WRITE)
		access |= IBV_ACCESS_REMOTE_WRITE;
	t0 = kvl_now_ns();
	mr = ibv_reg_mr(d->pd, base, len, access);
	t1 = kvl_now_ns();
	if (ns != NULL)
		*ns = t1 - t0;
	if (mr == NULL) {
		int e = errno ? errno : EIO;
		char cur[32], max[32];

		if (e == ENOMEM || e == EPERM) {
			kvl_memlock_limits(cur, max, sizeof(cur));
			kvl_verbs_errf(
				err, errlen,
				"%s: cannot register %llu KiB at %p: %s; the locked-memory limit "
				"RLIMIT_MEMLOCK is %s (hard %s) and registration pins every page: "
				"raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity in the "
				"systemd unit, or a memlock line in limits.conf)",
				d->name, (unsigned long long)(len >> 10), base, strerror(e), cur,
				max);
		} else {
			kvl_verbs_errf(err, errlen, "%s: cannot register %llu bytes at %p: %s",
				       d->name, (unsigned long long)len, base, strerror(e));
		}
		return -e;
	}
	d->mr[n] = (struct mr_ent){ (uintptr_t)base, len, mr->lkey, mr };
	__atomic_store_n(&d->n_mr, n + 1, __ATOMIC_RELEASE);
	if (rkey != NULL)
		*rkey = mr->rkey;
	return 0;
}

struct ibv_pd *kvl_verbs_dev_pd(const struct kvl_verbs_dev *d)
{
	return d->pd;
}

int kvl_verbs_adopt_mr(struct kvl_verbs_dev *d, struct ibv_mr *mr, char *err, size_t errlen)
{
	unsigned n = d->n_mr;

	kvl_verbs_err_clear(err, errlen);
	if (n == MAX_MRS) {
		kvl_verbs_errf(err, errlen,
			       "%s: %u regions are registered already, the most one device holds",
			       d->name, MAX_MRS);
		return -ENOSPC;
	}
	d->mr[n] = (struct mr_ent){ (uintptr_t)mr->addr, mr->length, mr->lkey, mr };
	__atomic_store_n(&d->n_mr, n + 1, __ATOMIC_RELEASE);
	return 0;
}

/* kvl_verbs_local_check() past the hinted region: every region, in order. */
int kvl_verbs_local_find(struct kvl_verbs_conn *c, uintptr_t a, uint32_t len, uint32_t *lkey)
{
	const struct kvl_verbs_dev *d = c->d;
	unsigned n = __atomic_load_n(&d->n_mr, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++) {
		const struct mr_ent *m = &d->mr[i];

		if (a >= m->base && a - m->base <= m->len && len <= m->len - (a - m->base)) {
			c->mr_last = *m;
			*lkey = m->lkey;
			return KVL_OK;
		}
	}
	*lkey = 0;
	return KVL_ERR_LOCAL;
}
