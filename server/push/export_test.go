package push

import "crypto/x509"

// TrustForTest makes d trust roots (a test receiver's certificate).
func TrustForTest(d *Deliverer, roots *x509.CertPool) { d.conns.tls.RootCAs = roots }
