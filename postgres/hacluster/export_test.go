package hacluster

// MakeDir makes a cluster directory in parent as Start does, and holds its
// lock until unlock, as a running test's cluster does; record records a
// process as started in it.
func MakeDir(parent string) (dir string, record func(pid int, argv []string) error, unlock func(), err error) {
	c := &Cluster{}
	if err := c.makeDir(parent); err != nil {
		return "", nil, nil, err
	}
	return c.dir, c.rec.record, func() { c.lock.Close() }, nil
}

// PostgresBin is the PostgreSQL installation the clusters run (the parent
// of bin/).
func PostgresBin() (string, error) { return findPG("") }
