// The principal Kafka's broker gives each TLS client certificate named on the command
// line, one a line: Java's X500Principal.getName() of its subject through Kafka's own
// SslPrincipalMapper under ssl.principal.mapping.rules=DEFAULT. Run as a single-file
// source program with Kafka's jars on the class path (tests/kafka/test_tls_principal.py).

import java.io.FileInputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.ssl.SslPrincipalMapper;

public class CertificatePrincipal {
    public static void main(String[] paths) throws Exception {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        SslPrincipalMapper mapper = SslPrincipalMapper.fromRules("DEFAULT");
        for (String path : paths) {
            try (FileInputStream in = new FileInputStream(path)) {
                X509Certificate certificate = (X509Certificate) factory.generateCertificate(in);
                String subject = certificate.getSubjectX500Principal().getName();
                System.out.println(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, mapper.getName(subject)));
            }
        }
    }
}
