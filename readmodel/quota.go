package readmodel

// Quota is the key of one subject's (a user id, a client address) count
// under a quota of the API ("writes", "reads", "registrations"), in the
// namespace but no projection version: a quota is not a read model, and
// it expires on its own within its period. go-redis/redis_rate, which
// keeps the count, writes it under "rate:" followed by this name.
func (k Keys) Quota(kind, subject string) string {
	return k.Prefix + "quota:" + kind + ":{" + subject + "}"
}
